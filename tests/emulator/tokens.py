"""Deterministic token estimate and canonical JSON.

No tokenizer for current Claude models exists offline, so every count in the emulator comes from
:func:`estimate_tokens` (about 4 characters per token). It is the one place to change if a better
estimate is wanted. Canonical JSON drops ``cache_control`` markers so that moving a breakpoint never
changes what a block "is" (the provider hashes content, not markers).
"""

from __future__ import annotations

import json
import math
from typing import Any

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens of ``text``: ceil(len / 4), at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def is_marker(value: object) -> bool:
    """True for a ``cache_control`` value (``{"type": "ephemeral", ...}``).

    Checking the shape, not only the key, keeps a JSON-schema property that happens to be named
    ``cache_control`` (inside a tool's ``input_schema``) part of the content.
    """
    return isinstance(value, dict) and value.get("type") == "ephemeral"


def strip_cache_control(value: Any) -> Any:
    """A copy of ``value`` with every ``cache_control`` marker removed, key order kept."""
    if isinstance(value, dict):
        return {
            k: strip_cache_control(v) for k, v in value.items() if not (k == "cache_control" and is_marker(v))
        }
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def find_markers(value: Any) -> list[dict[str, Any]]:
    """Every ``cache_control`` marker inside ``value`` (the block itself and nested parts)."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "cache_control" and is_marker(v):
                found.append(v)
            else:
                found.extend(find_markers(v))
    elif isinstance(value, list):
        for v in value:
            found.extend(find_markers(v))
    return found


def canonical_json(value: Any) -> str:
    """Compact JSON, non-ASCII kept, key order as received, cache_control removed."""
    return json.dumps(strip_cache_control(value), separators=(",", ":"), ensure_ascii=False)


def block_tokens(block: Any) -> int:
    """Tokens of one content block / tool definition / message."""
    return estimate_tokens(canonical_json(block))


def text_tokens(text: str) -> int:
    """Tokens of generated output text (0 for an empty string)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def count_markers_in(*values: Any) -> int:
    """Number of cache_control markers across ``values``."""
    return sum(len(find_markers(v)) for v in values)
