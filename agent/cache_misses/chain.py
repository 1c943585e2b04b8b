"""A request body as a provider's prefix cache sees it: a chain of block positions.

Anthropic caches prefixes that end at a block: each tool definition, each system block, each content
block of each message, in that order. OpenAI caches the token prefix of the whole prompt; its positions
here are message boundaries. Each position carries a digest of the entire prefix through it (one running
hash, so equal digests mean equal prefixes), an estimate of the prefix's tokens and the TTL of a
``cache_control`` marker placed on it.

Two things are left out of the digests on purpose: the markers (the provider hashes content, so moving
a breakpoint changes no prefix) and the model (so the same bytes sent to another model show up as a
model switch, not as changed bytes). Files are hashed by their placeholder (``herald-media:<sha256>``):
the body is built without their bytes, which identify them no better and cost far more to hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from agent.cache_policy import Ttl
from agent.model.tokens import CHARS_PER_TOKEN  # rescaled to the reported totals
from agent.model.wire import PLACEHOLDER

Section = Literal["tools", "system", "messages"]


_FILE = re.compile(re.escape(PLACEHOLDER) + r"([0-9a-f]{64})")


@dataclass(frozen=True)
class Position:
    """One block (or, for OpenAI, one message) of a request and the prefix that ends with it."""

    digest: str
    tokens: int  # estimated tokens of the whole prefix through this position
    ttl: Ttl | None  # the TTL of a cache_control marker on this block, if any
    section: Section
    group: int | None  # which wire message (see :func:`wire_groups`) the block belongs to; None before


@dataclass(frozen=True)
class Chain:
    """A request's positions in cache order. ``marked``: Anthropic's rules apply (breakpoints,
    lookback); otherwise automatic prefix caching (OpenAI)."""

    positions: tuple[Position, ...]
    marked: bool

    @property
    def total_tokens(self) -> int:
        return self.positions[-1].tokens if self.positions else 0

    @property
    def prompt_end(self) -> int:
        """Index of the last tools/system position (-1 when there is none)."""
        index = -1
        for index, position in enumerate(self.positions):
            if position.section == "messages":
                return index - 1
        return index

    def group_ends(self) -> dict[int, int]:
        """For each wire message: the index of its last position."""
        return {p.group: i for i, p in enumerate(self.positions) if p.group is not None}

    def breakpoints(self) -> list[int]:
        return [i for i, p in enumerate(self.positions) if p.ttl is not None]

    def scaled(self, total_tokens: int) -> Chain:
        """The same chain with its token estimates scaled so the whole prompt counts ``total_tokens``
        (what the provider reported): the estimate's error shrinks to its uneven spread."""
        estimate = self.total_tokens
        if estimate <= 0 or total_tokens <= 0:
            return self
        factor = total_tokens / estimate
        positions = tuple(replace(p, tokens=round(p.tokens * factor)) for p in self.positions)
        return Chain(positions, self.marked)


@dataclass(frozen=True)
class _Item:
    tag: str  # the section or role: equal blocks under different roles are different prefixes
    block: Any
    section: Section
    group: int | None


LONG_TEXT = 256  # a block's text fields longer than this are hashed as they are, not JSON-escaped first


def canonical(block: Any) -> tuple[str, list[str]]:
    """``block`` without its own ``cache_control`` marker, as compact JSON (key order as sent) with its
    long text fields left empty, and those texts. JSON-escaping a whole prompt on every request would cost
    more than everything else the check does; the texts are hashed as they are and counted with the
    characters escaping would add."""
    if not isinstance(block, dict):
        return json.dumps(block, ensure_ascii=False, separators=(",", ":")), []
    short: dict[str, Any] = {}
    texts: list[str] = []
    for key, value in block.items():
        if key == "cache_control":
            continue
        if isinstance(value, str) and len(value) > LONG_TEXT:
            texts.append(value)
            value = ""
        short[key] = value
    return json.dumps(short, ensure_ascii=False, separators=(",", ":")), texts


def escaped_length(text: str) -> int:
    """About the characters ``text`` takes as a JSON string's contents (the commonest escapes counted)."""
    return len(text) + text.count("\n") + text.count('"')


def estimate_tokens(text: str, media_tokens: Mapping[str, int], chars: int = 0) -> int:
    """Tokens of a block's JSON ``text`` plus ``chars`` more characters: ~4 characters each, files by
    their own estimate (pixels, pages)."""
    if PLACEHOLDER not in text:
        return math.ceil((len(text) + chars) / CHARS_PER_TOKEN)
    files = _FILE.findall(text)
    length = len(text) + chars - sum(len(PLACEHOLDER) + len(sha) for sha in files)
    return math.ceil(length / CHARS_PER_TOKEN) + sum(media_tokens.get(sha, 0) for sha in files)


def _marker_ttl(block: Any) -> Ttl | None:
    marker = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(marker, dict) or marker.get("type") != "ephemeral":
        return None
    return "1h" if marker.get("ttl") == "1h" else "5m"


def _chain(items: Iterator[_Item], marked: bool, media_tokens: Mapping[str, int]) -> Chain:
    # SHA-1 names prefixes here, it guards nothing; it is the fastest hashlib has (~0.5 GB/s), and a whole
    # prompt is hashed once per request.
    running = hashlib.sha1(usedforsecurity=False)
    positions: list[Position] = []
    tokens = 0
    for item in items:
        text, texts = canonical(item.block)
        running.update(item.tag.encode() + b"\x1f" + text.encode())
        for long in texts:
            running.update(b"\x1f")
            running.update(long.encode())
        running.update(b"\x1e")
        tokens += estimate_tokens(text, media_tokens, sum(escaped_length(long) for long in texts))
        ttl = _marker_ttl(item.block)
        positions.append(Position(running.hexdigest()[:32], tokens, ttl, item.section, item.group))
    return Chain(tuple(positions), marked)


def _anthropic_items(body: Mapping[str, Any]) -> Iterator[_Item]:
    for tool in body.get("tools") or []:
        yield _Item("tool", tool, "tools", None)
    system = body.get("system")
    if isinstance(system, str) and system:
        yield _Item("system", {"type": "text", "text": system}, "system", None)
    elif isinstance(system, list):
        for block in system:
            yield _Item("system", block, "system", None)
    for index, message in enumerate(body.get("messages") or []):
        role, content = str(message.get("role", "")), message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            yield _Item(role, block, "messages", index)


def _openai_items(body: Mapping[str, Any], parts: bool) -> Iterator[_Item]:
    """Tools, the system message, then each message: whole (automatic caching counts tokens, so message
    boundaries are the positions that matter) or, with ``parts`` (Claude behind OpenRouter, which takes
    Anthropic's markers on content parts), part by part as Anthropic's cache sees them."""
    for tool in body.get("tools") or []:
        yield _Item("tool", tool, "tools", None)
    messages = list(body.get("messages") or [])
    start = 1 if messages and messages[0].get("role") == "system" else 0
    for index, message in enumerate(messages):
        section: Section = "system" if index < start else "messages"
        group = None if index < start else index - start
        role, content = str(message.get("role", "")), message.get("content")
        if not parts or role == "tool":
            yield _Item(role, message, section, group)
            continue
        if isinstance(content, str) and content:
            yield _Item(role, {"type": "text", "text": content}, section, group)
        elif isinstance(content, list):
            for part in content:
                yield _Item(role, part, section, group)
        for call in message.get("tool_calls") or []:
            yield _Item(role, call, section, group)


def _has_markers(body: Mapping[str, Any]) -> bool:
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list) and any(_marker_ttl(part) for part in content):
            return True
    return False


def request_chain(api: str, body: Mapping[str, Any], media_tokens: Mapping[str, int]) -> Chain:
    """The chain of a request ``body`` in ``api``'s wire format ("anthropic" | "openai")."""
    if api == "anthropic":
        return _chain(_anthropic_items(body), True, media_tokens)
    parts = _has_markers(body)
    return _chain(_openai_items(body, parts), parts, media_tokens)


def wire_groups(api: str, roles: Sequence[str]) -> list[list[int]]:
    """Which of a request's messages (by index, given their roles) make up each wire message.

    Anthropic sends consecutive tool results as one user message of ``tool_result`` blocks
    (``agent.providers.anthropic_provider.group_wire_messages``); OpenAI sends every message alone.
    """
    if api != "anthropic":
        return [[index] for index in range(len(roles))]
    groups: list[list[int]] = []
    for index, role in enumerate(roles):
        if role == "tool" and groups and roles[groups[-1][-1]] == "tool":
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups
