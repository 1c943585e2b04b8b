"""What every provider implements, and the request/response shapes the agent loop uses."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.cache_policy import Policy, Ttl
from agent.messages import Message, ToolCall
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


@dataclass(frozen=True)
class ProviderResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str
    usage: Usage


class StreamedReply:
    """Collects a streamed answer (text deltas, tool calls by index) into a ``ProviderResponse``."""

    def __init__(self) -> None:
        self.text_parts: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}

    def call(self, index: int) -> dict[str, str]:
        """The tool call at ``index`` (created empty on first sight): ``id``, ``name``, ``json``."""
        return self.calls.setdefault(index, {"id": "", "name": "", "json": ""})

    def response(self, stop_reason: str, usage: Usage) -> ProviderResponse:
        tool_calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments_json=c["json"] or "{}")
            for _, c in sorted(self.calls.items())
        )
        return ProviderResponse("".join(self.text_parts), tool_calls, stop_reason, usage)


class ProviderError(Exception):
    """A failed model call. ``retryable`` errors are retried by ``complete_with_retries``.

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
        self.attempts = 1  # set by complete_with_retries: how many calls were made in all


class Provider(ABC):
    """A model API. Implementations convert neutral messages to wire format deterministically."""

    api: str  # "anthropic" | "openai": the wire format of stored payloads
    name: str  # configured provider name, for logs and the usage table
    model: str

    @abstractmethod
    async def complete(
        self, request: ProviderRequest, on_text: TextCallback | None = None
    ) -> ProviderResponse:
        """Make one attempt (streaming); any failure is raised as a ``ProviderError``, nothing else."""

    @abstractmethod
    def wire_message(self, message: Message) -> dict[str, Any]:
        """The wire fragment ``message`` is sent as; stored with the message as its payload."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release network resources."""

    def wire_fragment(self, message: Message) -> dict[str, Any]:
        """The stored payload when it is in this provider's format, else a fresh conversion."""
        if message.payload is not None and message.payload_api == self.api:
            return message.payload
        return self.wire_message(message)
