"""What the emulated model says, and which requests fail.

Tests script replies (FIFO) and faults (HTTP errors, mid-stream errors, dropped connections,
truncated bodies, stalls) ahead of time; everything else gets a deterministic default reply so runs
are reproducible. A faulted request never consumes a scripted reply.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .tokens import CHARS_PER_TOKEN, canonical_json, estimate_tokens, text_tokens
from .wire import Outcome, cut_in_half, sse_cut

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
class Fault:
    """A queued failure for the next ``remaining`` matching requests (of ``api``, or of either API; of
    ``model``, or of any), until the emulated clock reaches ``until`` (None: no end).

    ``EARLY`` faults hit before the request is processed (the provider never began: no cache write,
    no reply); the others hit a request that was accounted and began to answer. ``STREAM_ONLY``
    faults pass over non-streaming requests, which keep looking further down the queue.
    """

    remaining: int
    api: str | None
    model: str | None = field(default=None, kw_only=True)
    until: float | None = field(default=None, kw_only=True)

    EARLY: ClassVar[bool] = False
    STREAM_ONLY: ClassVar[bool] = False

    def matches(self, api: str, stream: bool, model: str) -> bool:
        return self.api in (None, api) and self.model in (None, model) and (stream or not self.STREAM_ONLY)

    def over(self, now: float) -> bool:
        return self.until is not None and now >= self.until


@dataclass
class HttpFault(Fault):
    """An HTTP error status instead of an answer."""

    status: int
    retry_after: float | None

    EARLY: ClassVar[bool] = True


@dataclass
class StallFault(Fault):
    """Hold the request ``seconds`` before answering; a gateway's 504 is all that ever comes."""

    seconds: float

    EARLY: ClassVar[bool] = True

    def describe(self) -> str:
        return f"stalled: held {self.seconds:g}s, then 504"


@dataclass
class AnswerFault(Fault, ABC):
    """A fault in an answer that began: ``after_text`` is streamed (or sent) before it breaks."""

    after_text: str

    @abstractmethod
    def describe(self) -> str:
        """The ``error`` recorded for the request."""


@dataclass
class StreamFault(AnswerFault):
    """``after_text``, then the API's own error event (``error_type``) ends the stream."""

    error_type: str

    STREAM_ONLY: ClassVar[bool] = True

    def describe(self) -> str:
        return f"{self.error_type}: mid-stream"


@dataclass
class DropFault(AnswerFault):
    """``after_text``, then the TCP connection closes in the middle of the body.

    ``close_delimited`` sends the stream without chunked framing (ended by closing the connection,
    HTTP/1.0 style), so the client reads a normal end of body: only the missing terminal event
    shows the answer was cut short.
    """

    close_delimited: bool = False

    STREAM_ONLY: ClassVar[bool] = True

    def describe(self) -> str:
        framing = "close-delimited " if self.close_delimited else ""
        return f"dropped: connection closed mid-stream ({framing}body unfinished)"


@dataclass
class TruncateFault(AnswerFault):
    """A JSON document cut in half: the body, or one SSE ``data:`` line after ``after_text``."""

    def describe(self) -> str:
        return "truncated: JSON cut in half"


def broken_answer(
    fault: AnswerFault,
    stream: bool,
    *,
    document: dict[str, Any],
    partial: list[bytes],
    error_event: Callable[[str], bytes],
    next_event: tuple[dict[str, Any], str | None],
) -> Outcome:
    """How ``fault`` breaks an answer, from the API's own pieces.

    ``document`` is the whole non-streamed answer; ``partial`` the stream's first events, up to and
    including ``after_text``; ``error_event`` the API's error event for an error type; ``next_event``
    the payload and SSE name of the event that would come next (the one a truncation cuts).
    """
    if isinstance(fault, TruncateFault) and not stream:
        return Outcome(200, raw=cut_in_half(document), headers={"Content-Type": "application/json"})
    if isinstance(fault, StreamFault):
        return Outcome(200, events=[*partial, error_event(fault.error_type)])
    if isinstance(fault, TruncateFault):
        return Outcome(200, events=[*partial, sse_cut(*next_event)])
    close_delimited = isinstance(fault, DropFault) and fault.close_delimited
    return Outcome(200, events=partial, drop=True, chunked=not close_delimited)


class FaultQueue:
    """Pending failures, consumed in the order they were queued by matching requests.

    A request takes the first fault that matches it, in two steps: :meth:`take` with ``early=True``
    on arrival and with ``early=False`` once it is validated and accounted, so a request the API
    rejects (400) leaves a late fault for the next one.
    """

    def __init__(self) -> None:
        self.pending: list[Fault] = []

    def add(self, fault: Fault) -> None:
        if fault.remaining > 0:
            self.pending.append(fault)

    def clear(self) -> None:
        self.pending.clear()

    def take(self, api: str, stream: bool, *, early: bool, model: str = "", now: float = 0.0) -> Fault | None:
        """The first fault matching the request, consumed once, if it belongs to this step (faults whose
        time is over are dropped)."""
        self.pending = [fault for fault in self.pending if not fault.over(now)]
        for fault in self.pending:
            if fault.matches(api, stream, model):
                if early != fault.EARLY:
                    return None
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.pending.remove(fault)
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
