"""Turn a request body into what a provider's prefix cache sees.

Anthropic caches whole block positions (tools, then system, then message content blocks), so a
request becomes a list of :class:`Position` with a cumulative prefix hash each. OpenAI caches a
token prefix of the serialized prompt, so a request becomes a :class:`PrefixLayout` of 128-token
boundaries. Both are pure functions of the body; validation errors the real APIs return for bad
cache markers are raised here as :class:`RequestInvalid`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .errors import RequestInvalid
from .media import (
    MediaCost,
    anthropic_block_cost,
    anthropic_image_tokens,
    check_media_count,
    image_part_size,
    is_media_block,
    openai_serializable,
)
from .tokens import CHARS_PER_TOKEN, block_tokens, canonical_json, estimate_tokens, find_markers, is_marker

__all__ = ["Layout", "Position", "PrefixLayout", "RequestInvalid", "anthropic_layout", "openai_layout"]

MAX_BREAKPOINTS = 4
TTLS = ("5m", "1h")
OPENAI_MIN_PREFIX = 1024
OPENAI_STEP = 128
OPENAI_ROUTING_TOKENS = 256


@dataclass(frozen=True)
class Position:
    """One cacheable block position: its tokens, the prefix up to it, and a breakpoint TTL if any."""

    tokens: int
    cum_tokens: int
    prefix_hash: str
    ttl: str | None = None


@dataclass
class Layout:
    """A request as Anthropic's cache sees it."""

    positions: list[Position] = field(default_factory=list)
    markers: int = 0

    @property
    def total_tokens(self) -> int:
        return self.positions[-1].cum_tokens if self.positions else 0

    @property
    def breakpoints(self) -> list[int]:
        return [i for i, p in enumerate(self.positions) if p.ttl is not None]


@dataclass(frozen=True)
class _Item:
    tag: str  # section/role, part of the hash so equal blocks in different roles differ
    block: Any
    markers: list[dict[str, Any]]


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _check_block(block: Any, where: str, markers: list[dict[str, Any]]) -> None:
    if not isinstance(block, dict):
        return
    kind = block.get("type")
    if kind == "text" and block.get("text") == "":
        if markers:
            raise RequestInvalid(f"{where}: cache_control cannot be set for empty text blocks")
        raise RequestInvalid(f"{where}: text content blocks must be non-empty")
    if kind in ("thinking", "redacted_thinking") and is_marker(block.get("cache_control")):
        raise RequestInvalid(f"{where}: cache_control cannot be set for thinking blocks")


def _items_anthropic(body: dict[str, Any]) -> tuple[list[_Item], int]:
    """Flatten tools → system → messages; returns the items and where messages start."""
    items: list[_Item] = []
    for tool in body.get("tools") or []:
        items.append(_Item("tool", tool, find_markers(tool)))
    system = body.get("system")
    if isinstance(system, str):
        if system:
            items.append(_Item("system", _text_block(system), []))
    elif isinstance(system, list):
        for i, block in enumerate(system):
            markers = find_markers(block)
            _check_block(block, f"system.{i}", markers)
            items.append(_Item("system", block, markers))
    messages_start = len(items)
    messages = body.get("messages") or []
    for mi, msg in enumerate(messages):
        role = str(msg.get("role", ""))
        content = msg.get("content")
        last_assistant = mi == len(messages) - 1 and role == "assistant"
        if isinstance(content, str):
            if not content:
                if last_assistant:
                    continue
                raise RequestInvalid(
                    f"messages.{mi}: all messages must have non-empty content except for the "
                    "optional final assistant message"
                )
            items.append(_Item(role, _text_block(content), []))
            continue
        for bi, block in enumerate(content or []):
            markers = find_markers(block)
            _check_block(block, f"messages.{mi}.content.{bi}", markers)
            items.append(_Item(role, block, markers))
    return items, messages_start


def _items_openai(body: dict[str, Any]) -> tuple[list[_Item], int]:
    """OpenRouter-style Claude: OpenAI messages whose content parts may carry cache_control."""
    items = [_Item("tool", tool, find_markers(tool)) for tool in body.get("tools") or []]
    messages_start = len(items)
    for mi, msg in enumerate(body.get("messages") or []):
        role = str(msg.get("role", ""))
        content = msg.get("content")
        if role == "tool":
            block = {"type": "tool_result", "tool_call_id": msg.get("tool_call_id"), "content": content}
            items.append(_Item(role, block, find_markers(block)))
            continue
        if isinstance(content, str) and content:
            items.append(_Item(role, _text_block(content), find_markers(msg)))
        elif isinstance(content, list):
            for bi, part in enumerate(content):
                markers = find_markers(part)
                _check_block(part, f"messages.{mi}.content.{bi}", markers)
                items.append(_Item(role, part, markers))
        for call in msg.get("tool_calls") or []:
            items.append(_Item(role, call, find_markers(call)))
    return items, messages_start


def _cost(block: Any, where: str) -> MediaCost:
    """A block's cost: files by their pixels and pages (validated like the API does), the rest by size.
    A tool result holding images (a screenshot) costs its other parts by size and its files like files."""
    nested = block.get("content") if isinstance(block, dict) else None
    if isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(nested, list):
        parts = block["content"]
        costs = [_cost(part, f"{where}.content.{i}") for i, part in enumerate(parts) if is_media_block(part)]
        rest = {**block, "content": [part for part in parts if not is_media_block(part)]}
        return MediaCost(
            block_tokens(rest) + sum(c.tokens for c in costs),
            images=sum(c.images for c in costs),
            pages=sum(c.pages for c in costs),
        )
    if not is_media_block(block):
        return MediaCost(block_tokens(block))
    if block["type"] == "image_url":  # Claude behind OpenRouter: counted by Anthropic's rule
        _, width, height = image_part_size(block, where)
        return MediaCost(anthropic_image_tokens(width, height), images=1)
    return anthropic_block_cost(block, where)


def _marker_ttl(marker: dict[str, Any]) -> str:
    ttl = marker.get("ttl", "5m")
    if ttl not in TTLS:
        raise RequestInvalid(f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl!r})")
    return str(ttl)


def _build(model: str, items: list[_Item], messages_start: int, salt: str, top: Any) -> Layout:
    """Positions with cumulative hashes; validates the breakpoint count, TTL order and media count."""
    h = hashlib.sha256(model.encode())
    positions: list[Position] = []
    markers = images = pages = 0
    cum = 0
    for i, item in enumerate(items):
        if i == messages_start:
            h.update(salt.encode() + b"\x1d")
        text = canonical_json(item.block)
        h.update(item.tag.encode() + b"\x1f" + text.encode() + b"\x1e")
        cost = _cost(item.block, f"{item.tag} block {i}")
        tokens = cost.tokens
        images, pages = images + cost.images, pages + cost.pages
        cum += tokens
        ttl = _marker_ttl(item.markers[-1]) if item.markers else None
        markers += len(item.markers)
        positions.append(Position(tokens, cum, h.hexdigest(), ttl))
    if is_marker(top) and positions:
        last = positions[-1]
        if last.ttl is None:
            positions[-1] = Position(last.tokens, last.cum_tokens, last.prefix_hash, _marker_ttl(top))
            markers += 1
    check_media_count(images, pages)
    if markers > MAX_BREAKPOINTS:
        raise RequestInvalid(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {markers}."
        )
    seen_5m = False
    for p in positions:
        if p.ttl == "5m":
            seen_5m = True
        elif p.ttl == "1h" and seen_5m:
            raise RequestInvalid(
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. "
                "Note that blocks are processed in the following order: `tools`, `system`, `messages`."
            )
    return Layout(positions, markers)


def anthropic_layout(body: dict[str, Any]) -> Layout:
    """The block positions of an Anthropic Messages request.

    ``tool_choice`` and ``thinking`` are mixed into the hash where messages start: changing them
    invalidates the messages part of the cache but not tools/system, as the provider documents.
    """
    items, start = _items_anthropic(body)
    salt = canonical_json({"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking")})
    return _build(str(body.get("model", "")), items, start, salt, body.get("cache_control"))


def openai_claude_layout(body: dict[str, Any]) -> Layout:
    """Block positions of an OpenRouter Claude request (content-part cache_control honoured)."""
    items, start = _items_openai(body)
    salt = canonical_json({"tool_choice": body.get("tool_choice")})
    return _build(str(body.get("model", "")), items, start, salt, body.get("cache_control"))


@dataclass(frozen=True)
class PrefixLayout:
    """A Chat Completions prompt as OpenAI's automatic cache sees it."""

    total_tokens: int
    boundaries: list[tuple[int, str]]  # (prefix tokens, prefix hash) at 1024, 1152, ...
    routing_hash: str  # hash of the first 256 tokens


def openai_serialize(body: dict[str, Any]) -> str:
    """Tools (and response schema), then each message, each as canonical JSON plus a newline.

    Appending a message therefore extends the string: a message-list prefix is a string prefix.
    """
    parts: list[str] = []
    if body.get("tools"):
        parts.append(canonical_json(body["tools"]))
    if body.get("response_format"):
        parts.append(canonical_json({"response_format": body["response_format"]}))
    parts.extend(canonical_json(m) for m in body.get("messages") or [])
    return "".join(p + "\n" for p in parts)


def openai_layout(body: dict[str, Any]) -> PrefixLayout:
    model = str(body.get("model", ""))
    text = openai_serialize(openai_serializable(body))
    total = estimate_tokens(text)
    routing = hashlib.sha256(text[: OPENAI_ROUTING_TOKENS * CHARS_PER_TOKEN].encode()).hexdigest()
    h = hashlib.sha256(model.encode() + b"\x1f")
    boundaries: list[tuple[int, str]] = []
    done = 0
    full_tokens = len(text) // CHARS_PER_TOKEN
    for b in range(OPENAI_MIN_PREFIX, full_tokens + 1, OPENAI_STEP):
        end = b * CHARS_PER_TOKEN
        h.update(text[done:end].encode())
        done = end
        boundaries.append((b, h.hexdigest()))
    return PrefixLayout(total, boundaries, routing)
