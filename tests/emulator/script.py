"""What the emulated model says, and which requests fail.

Tests script replies (FIFO) and faults (HTTP errors, mid-stream errors) ahead of time; everything
else gets a deterministic default reply so runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .tokens import CHARS_PER_TOKEN, canonical_json, estimate_tokens, text_tokens

_FILLER = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]


@dataclass
class ToolUse:
    """One tool call in a scripted reply; ``id`` is made deterministic when left out."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class Reply:
    """A scripted model reply.

    ``text_tokens`` pads (or makes) the text with deterministic filler to about that many tokens.
    ``stop_reason`` accepts Anthropic or OpenAI vocabulary; by default it follows the content.
    """

    text: str | None = None
    tool_calls: list[ToolUse] = field(default_factory=list)
    text_tokens: int | None = None
    stop_reason: str | None = None

    def full_text(self) -> str:
        text = self.text or ""
        if self.text_tokens is not None:
            text = pad_text(text, self.text_tokens)
        return text


Responder = Callable[[dict[str, Any], str], Reply | None]

_TO_OPENAI = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop_sequence": "stop"}
_TO_ANTHROPIC = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def anthropic_stop_reason(reason: str) -> str:
    return _TO_ANTHROPIC.get(reason, reason)


def openai_finish_reason(reason: str) -> str:
    return _TO_OPENAI.get(reason, reason)


def filler(chars: int, seed: int = 0) -> str:
    """Deterministic words, exactly ``chars`` characters long."""
    words: list[str] = []
    size = 0
    i = seed
    while size < chars:
        word = _FILLER[i % len(_FILLER)]
        words.append(word)
        size += len(word) + 1
        i += 1
    text = " ".join(words)[:chars]
    return text[:-1] + "." if text.endswith(" ") else text


def pad_text(text: str, tokens: int) -> str:
    """``text`` extended with filler to ``tokens`` tokens (left as is when already that long)."""
    want = tokens * CHARS_PER_TOKEN
    if len(text) >= want:
        return text
    if not text:
        return filler(want)
    return text + " " + filler(want - len(text) - 1) if want - len(text) > 1 else text + "."


def last_user_text(messages: list[Any]) -> str:
    """Text of the last user message (tool results included), for the default reply."""
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") in ("user", "tool"):
            return " ".join(_texts(msg.get("content"))).strip()
    return ""


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return [value["text"]]
        return _texts(value.get("content"))
    return []


def default_reply(number: int, messages: list[Any], tokens: int) -> Reply:
    """'Emulated reply N to: <60 chars of the last user text>' padded to ~``tokens`` tokens."""
    head = f"Emulated reply {number} to: {last_user_text(messages)[:60]}"
    return Reply(text=pad_text(head, tokens))


@dataclass
class HttpFault:
    status: int
    remaining: int
    retry_after: float | None
    api: str | None


@dataclass
class StreamFault:
    error_type: str
    remaining: int
    after_text: str
    api: str | None


class FaultQueue:
    """Pending failures, consumed in the order they were queued by matching requests."""

    def __init__(self) -> None:
        self.http: list[HttpFault] = []
        self.stream: list[StreamFault] = []

    def clear(self) -> None:
        self.http.clear()
        self.stream.clear()

    def take_http(self, api: str) -> HttpFault | None:
        for fault in self.http:
            if fault.api in (None, api):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.http.remove(fault)
                return fault
        return None

    def take_stream(self, api: str) -> StreamFault | None:
        for fault in self.stream:
            if fault.api in (None, api):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.stream.remove(fault)
                return fault
        return None


def output_tokens(text: str, calls: list[ToolUse]) -> int:
    """Estimated output tokens of a reply (text plus tool-call JSON)."""
    total = text_tokens(text)
    for call in calls:
        total += estimate_tokens(call.name) + estimate_tokens(canonical_json(call.arguments))
    return total


def fit_reply(reply: Reply, max_tokens: int | None) -> tuple[str, list[ToolUse], bool]:
    """The reply's text and tool calls cut to ``max_tokens``; True when it had to be cut."""
    text, calls = reply.full_text(), list(reply.tool_calls)
    if max_tokens is None or output_tokens(text, calls) <= max_tokens:
        return text, calls, False
    return text[: max(max_tokens, 0) * CHARS_PER_TOKEN], [], True
