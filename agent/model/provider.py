"""What every provider implements, and the request/response shapes the agent loop uses."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.cache_policy import Policy, Ttl
from agent.files.text import valid_text
from agent.model.messages import Message, ToolCall
from agent.model.tokens import CHARS_PER_TOKEN, estimate_total
from agent.model.wire import hydrate
from agent.prompt import SystemPrompt
from agent.usage import Usage

TextCallback = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ProviderRequest:
    """One model call on behalf of a session.

    ``system`` and ``tools`` are the session's stored bytes and are sent unchanged; only ``messages``
    grows. ``session_id`` keys provider-side routing (OpenAI's ``prompt_cache_key``).
    """

    session_id: str
    system: SystemPrompt
    tools: Sequence[dict[str, Any]]  # neutral schemas {"name", "description", "input_schema"}
    messages: Sequence[Message]
    max_tokens: int
    cache_policy: Policy = "layered"
    prefix_ttl: Ttl = "5m"
    tail_ttl: Ttl = "5m"
    task_appended: bool = False  # the last message is a side task after the session's history (review)


def estimate_input_tokens(request: ProviderRequest) -> int:
    """A rough size of what ``request`` sends (~4 characters per token), for when nothing was reported."""
    fixed = len(request.system.text()) + len(json.dumps(list(request.tools), ensure_ascii=False))
    return fixed // CHARS_PER_TOKEN + estimate_total(request.messages)


CUT_OFF_REASONS = frozenset({"max_tokens", "length"})  # Anthropic's and OpenAI's words for it


@dataclass(frozen=True)
class FailedOver:
    """A request answered by a fallback because its session's own model failed."""

    primary: str  # the session's own model
    fallback: str  # the model that answered
    reason: str  # what is wrong with the primary (``agent.failover.failure_reason``)

    @property
    def line(self) -> str:
        """The one line the person reads with the answer."""
        return f"The main model {self.reason}; this answer comes from {self.fallback}."


@dataclass(frozen=True)
class ProviderResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str
    usage: Usage
    failed_over: FailedOver | None = None  # answered by a fallback model (set by agent.model_calls)
    max_tokens: int | None = None  # lowered to this by the spend limits (set by agent.model_calls)

    @property
    def cut_off(self) -> bool:
        """The answer hit the ``max_tokens`` limit: it is incomplete, and so may be its tool calls."""
        return self.stop_reason in CUT_OFF_REASONS


class StreamProgress:
    """What the current attempt of a model call has cost so far, for a call cancelled mid-way.

    The provider calls :meth:`begin` right before it sends a request, sets ``reported`` when the
    stream reports usage early (Anthropic's ``message_start``), and counts streamed characters. A
    cancelled turn records :meth:`usage`: the provider's early report, or an estimate from the
    request's size, with the output streamed so far: what was paid, not nothing.
    """

    def __init__(self) -> None:
        self.sent = False
        self.reported: Usage | None = None
        self.output_chars = 0

    def begin(self) -> None:
        self.sent, self.reported, self.output_chars = True, None, 0

    def usage(self, request: ProviderRequest) -> Usage | None:
        """The usage to record for the attempt in flight; None when no request was sent."""
        if not self.sent:
            return None
        output = self.output_chars // CHARS_PER_TOKEN
        if self.reported is not None:
            return replace(self.reported, output_tokens=max(self.reported.output_tokens, output))
        return Usage(input_tokens=estimate_input_tokens(request), output_tokens=output)


class StreamedReply:
    """Collects a streamed answer (text deltas, tool calls by index) into a ``ProviderResponse``.

    Text from the provider is made valid here (:func:`agent.files.text.valid_text`): a JSON string may
    escape a lone surrogate, which could be neither printed nor stored.
    """

    def __init__(self, progress: StreamProgress | None = None) -> None:
        self.text_parts: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self._progress = progress

    def add_text(self, delta: str) -> str:
        """Append a text delta; returns it as it was kept (valid text)."""
        delta = valid_text(delta)
        self.text_parts.append(delta)
        if self._progress is not None:
            self._progress.output_chars += len(delta)
        return delta

    def call(self, index: int) -> dict[str, str]:
        """The tool call at ``index`` (created empty on first sight): ``id``, ``name``, ``json``."""
        return self.calls.setdefault(index, {"id": "", "name": "", "json": ""})

    def response(self, stop_reason: str, usage: Usage) -> ProviderResponse:
        tool_calls = tuple(
            ToolCall(
                id=valid_text(c["id"]),
                name=valid_text(c["name"]),
                arguments_json=valid_text(c["json"]) or "{}",
            )
            for _, c in sorted(self.calls.items())
        )
        return ProviderResponse("".join(self.text_parts), tool_calls, stop_reason, usage)


class ProviderError(Exception):
    """A failed model call. ``retryable`` errors are retried by ``call_with_retries``.

    The only exception ``Provider.complete`` raises (besides cancellation); ``kind`` names the
    cause for the user-facing sentence (see ``agent/providers/errors.py`` for the kinds).
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        kind: str = "error",
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.kind = kind
        self.attempts = 1  # set by call_with_retries: how many calls were made in all


class BatchUnsupported(Exception):
    """The provider (or the server behind its base URL) has no batch API: send the request normally."""


@dataclass(frozen=True)
class BatchFailed:
    """The batch ended without an answer to the request: it errored, expired or was cancelled."""

    reason: str


BatchAnswer = ProviderResponse | BatchFailed


class Provider(ABC):
    """A model API. Implementations convert neutral messages to wire format deterministically."""

    api: str  # "anthropic" | "openai": the wire format of stored payloads
    name: str  # configured provider name, for logs and the usage table
    model: str

    @abstractmethod
    async def complete(
        self,
        request: ProviderRequest,
        on_text: TextCallback | None = None,
        progress: StreamProgress | None = None,
    ) -> ProviderResponse:
        """Make one attempt (streaming); any failure is raised as a ``ProviderError``, nothing else.

        ``progress`` (optional) is kept up to date with what the attempt has cost so far.
        """

    @abstractmethod
    def wire_message(self, message: Message) -> dict[str, Any]:
        """The wire fragment ``message`` is sent as; stored with the message as its payload (files as
        placeholders, filled in by :meth:`wire_fragment`)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release network resources."""

    # -- the batch API (half price, answered within hours): ``agent.batching`` is its one caller --------

    async def submit_batch(self, request: ProviderRequest, custom_id: str) -> str:
        """Send ``request`` (the body :meth:`build_body` makes) as a batch of one; returns the batch's id.
        Raises :class:`BatchUnsupported` (no batch API here) or ``ProviderError``."""
        raise BatchUnsupported(f"provider {self.name} has no batch API")

    async def batch_ended(self, batch_id: str) -> bool:
        """Whether the batch has ended (its results can be read); raises ``ProviderError``."""
        raise NotImplementedError

    async def batch_result(self, batch_id: str, custom_id: str) -> BatchAnswer:
        """The ended batch's answer to ``custom_id``; raises ``ProviderError``."""
        raise NotImplementedError

    async def cancel_batch(self, batch_id: str) -> None:
        """Ask the provider to stop the batch (what ended already is still billed); raises
        ``ProviderError``."""
        raise NotImplementedError

    @abstractmethod
    def build_body(self, request: ProviderRequest, *, with_files: bool = True) -> dict[str, Any]:
        """The request body as sent, cache markers applied. ``with_files=False``: files stay placeholders
        (``agent.model.wire``), as stored: what the cache-miss check hashes instead of their bytes."""

    def stored_fragment(self, message: Message) -> dict[str, Any]:
        """The wire fragment of ``message`` with files as placeholders: the stored payload when it is in
        this provider's format, else a fresh conversion."""
        if message.payload is not None and message.payload_api == self.api:
            return message.payload
        return self.wire_message(message)

    def wire_fragment(self, message: Message) -> dict[str, Any]:
        """What goes on the wire for ``message``: :meth:`stored_fragment` with the bytes of its files
        filled in."""
        fragment = self.stored_fragment(message)
        if message.role == "assistant":  # files come with a person's message or a tool's (a screenshot)
            return fragment
        return hydrate(fragment, {m.sha256: m for m in message.media})  # a lost file included
