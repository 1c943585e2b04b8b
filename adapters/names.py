"""Display names from platforms, made safe to put in prompts and logs (shared by the adapters)."""

from __future__ import annotations

import re
import unicodedata

MAX_NAME_LENGTH = 64

_WHITESPACE = re.compile(r"\s+")
_ZERO_WIDTH_JOINER = "\u200d"  # part of composed emoji: keep it


def clean_name(text: str, limit: int = MAX_NAME_LENGTH) -> str:
    """``text`` on one line, without control or formatting characters, at most ``limit`` long.

    Names are user-controlled: bidi overrides and zero-width tricks are dropped (the zero-width
    joiner inside composed emoji is kept), whitespace is collapsed and the length capped.
    """
    kept = "".join(
        ch for ch in text if ch == _ZERO_WIDTH_JOINER or unicodedata.category(ch) not in ("Cc", "Cf")
    )
    return _WHITESPACE.sub(" ", kept).strip()[:limit].rstrip()
