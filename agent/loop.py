"""The tool loop: one user turn → model calls and tool runs until the model answers.

History discipline (ARCHITECTURE.md, invariant 3): messages are only ever appended. An assistant
message that calls tools is stored together with all its results in one transaction, so the stored
history never has a dangling tool call. A turn the provider could not answer is taken out of the
conversation (kept in the database, marked inactive), so the next request's prefix is exactly what the
cache already holds and the user can simply send the message again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent.cache_policy import ONE_HOUR, Policy, TtlSetting, choose_ttls
from agent.compression.boundaries import estimate_total
from agent.compression.engine import CompressionOutcome, ContextEngine
from agent.memory import MemoryStore
from agent.messages import Message, ToolCall
from agent.models import ModelInfo
from agent.providers.base import Provider, ProviderError, ProviderRequest, ProviderResponse
from agent.providers.retry import RetryPolicy, complete_with_retries, user_facing_error
from agent.store import SessionRecord, SessionStore
from agent.tools.registry import ToolContext, ToolRegistry, run_tool
from agent.usage import Usage, priced

log = logging.getLogger(__name__)

TITLE_CHARS = 60
CANCELLED_NOTE = "(The user cancelled this turn.)"


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ToolStarted:
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolFinished:
    name: str
    is_error: bool


@dataclass(frozen=True)
class Retrying:
    attempt: int
    delay: float
    reason: str
    discard_partial: bool  # text already streamed in this attempt will be sent again


@dataclass(frozen=True)
class Compressed:
    outcome: CompressionOutcome


TurnEvent = TextDelta | ToolStarted | ToolFinished | Retrying | Compressed
EventCallback = Callable[[TurnEvent], Awaitable[None]]


@dataclass(frozen=True)
class TurnResult:
    text: str
    usage: Usage
    iterations: int
    error: str | None = None  # one sentence for the user when no answer could be produced


@dataclass(frozen=True)
class AgentSettings:
    max_tokens: int = 4096
    max_iterations: int = 30
    cache_policy: Policy = "layered"
    cache_ttl: TtlSetting = "auto"
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class Agent:
    """Runs turns of stored sessions against one provider. Holds no per-session state."""

    def __init__(
        self,
        *,
        store: SessionStore,
        provider: Provider,
        registry: ToolRegistry,
        memory: MemoryStore,
        skills_dir: Path,
        model_info: ModelInfo,
        settings: AgentSettings,
        context_engine: ContextEngine | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.provider = provider
        self.registry = registry
        self.memory = memory
        self.skills_dir = skills_dir
        self.model_info = model_info
        self.settings = settings
        self.context_engine = context_engine
        self.clock = clock

    def with_payload(self, message: Message) -> Message:
        """Attach the wire fragment ``message`` is sent as, so it is stored exactly as sent."""
        return replace(message, payload=self.provider.wire_message(message), payload_api=self.provider.api)

    async def run_turn(
        self, session: SessionRecord, text: str, on_event: EventCallback | None = None
    ) -> TurnResult:
        """Answer ``text`` in ``session``. Cancel the task running this to stop the turn."""
        history = await self.store.load_messages(session.id)
        if not history and not session.title:
            await self.store.set_title(session.id, _title_from(text))
        [user_message] = await self.store.append_messages(
            session.id, [self.with_payload(Message(role="user", content=text))]
        )
        messages = [*history, user_message]
        turn_ids = [user_message.id]
        now = self.clock()
        recent = await self.store.request_times(session.id, since=now - 2 * ONE_HOUR)
        prefix_ttl, tail_ttl = choose_ttls(self.settings.cache_ttl, recent, now)
        total = Usage()
        iteration = 0
        answered = False  # the turn's final assistant message is stored: nothing left to close
        try:
            while iteration < self.settings.max_iterations:
                iteration += 1
                request = ProviderRequest(
                    session_id=session.id,
                    system=session.system_prompt,
                    tools=session.tools,
                    messages=messages,
                    max_tokens=self.settings.max_tokens,
                    cache_policy=self.settings.cache_policy,
                    prefix_ttl=prefix_ttl,
                    tail_ttl=tail_ttl,
                )
                response = await self._complete(session.id, request, on_event)
                total += response.usage
                assistant = self.with_payload(
                    Message(role="assistant", content=response.text, tool_calls=response.tool_calls)
                )
                if not response.tool_calls:
                    stored = await self.store.append_messages(session.id, [assistant])
                    answered = True
                    await self._maybe_compress(session, [*messages, *stored], response, on_event)
                    return TurnResult(text=response.text, usage=total, iterations=iteration)
                results = await self._run_tools(session, response.tool_calls, on_event)
                stored = await self.store.append_messages(session.id, [assistant, *results])
                messages.extend(stored)
                turn_ids.extend(m.id for m in stored)
                messages = await self._maybe_compress(session, messages, response, on_event)
            note = (
                f"(I stopped after {self.settings.max_iterations} tool steps without a final answer. "
                "Say 'continue' to let me go on.)"
            )
            await self.store.append_messages(
                session.id, [self.with_payload(Message(role="assistant", content=note))]
            )
            return TurnResult(text=note, usage=total, iterations=iteration)
        except ProviderError as error:
            sentence = user_facing_error(error, attempts=error.attempts)
            log.error("session %s: turn failed: %s (%s)", session.id, error, error.kind)
            await self.store.deactivate_messages([i for i in turn_ids if i is not None], "provider_failure")
            return TurnResult(text="", usage=total, iterations=iteration, error=sentence)
        except asyncio.CancelledError:
            if not answered:
                marker = self.with_payload(Message(role="assistant", content=CANCELLED_NOTE))
                await asyncio.shield(self.store.append_messages(session.id, [marker]))
            raise

    async def _maybe_compress(
        self,
        session: SessionRecord,
        messages: list[Message],
        response: ProviderResponse,
        on_event: EventCallback | None,
    ) -> list[Message]:
        """Compress when the reported prompt reached the engine's threshold; returns the history to use."""
        engine = self.context_engine
        if engine is None:
            return messages
        usage = response.usage
        if usage.prompt_tokens == 0:  # a compatible server that reports no usage: estimate instead
            usage = Usage(input_tokens=estimate_total(messages), output_tokens=usage.output_tokens)
        engine.on_usage(session.id, usage)
        if not engine.should_compress(session.id):
            return messages
        outcome = await engine.compress(session, messages, prompt_tokens=usage.prompt_tokens)
        if outcome is None or outcome.method == "failed":
            return messages
        if on_event is not None:
            await on_event(Compressed(outcome))
        return await self.store.load_messages(session.id)

    async def compress(self, session: SessionRecord) -> CompressionOutcome | None:
        """Compress now (``/compress``), whatever the thresholds say."""
        if self.context_engine is None:
            return None
        current, messages = await self._current(session)
        return await self.context_engine.compress(
            current, messages, prompt_tokens=current.last_prompt_tokens, force=True
        )

    async def hygiene(self, session: SessionRecord) -> CompressionOutcome | None:
        """Session hygiene, called by the gateway before a turn: compress a session that grew too large."""
        if self.context_engine is None:
            return None
        current, messages = await self._current(session)
        return await self.context_engine.hygiene(current, messages)

    async def _current(self, session: SessionRecord) -> tuple[SessionRecord, list[Message]]:
        """The session's stored state now: a caller's record may predate the last turn's usage."""
        current = await self.store.get_session(session.id) or session
        return current, await self.store.load_messages(session.id)

    async def _complete(
        self, session_id: str, request: ProviderRequest, on_event: EventCallback | None
    ) -> ProviderResponse:
        streamed = False

        async def on_text(delta: str) -> None:
            nonlocal streamed
            streamed = True
            if on_event is not None:
                await on_event(TextDelta(delta))

        async def on_retry(attempt: int, delay: float, error: ProviderError) -> None:
            nonlocal streamed
            if on_event is not None:
                await on_event(Retrying(attempt, delay, str(error), discard_partial=streamed))
            streamed = False

        response = await complete_with_retries(
            self.provider, request, policy=self.settings.retry, on_text=on_text, on_retry=on_retry
        )
        await self.record_usage(session_id, "turn", response.usage)
        return response

    async def record_usage(self, session_id: str, purpose: str, usage: Usage) -> None:
        record = priced(purpose, self.provider.name, self.provider.model, self.model_info, usage)
        await self.store.record_request(session_id, record, at=self.clock())

    async def _run_tools(
        self, session: SessionRecord, calls: tuple[ToolCall, ...], on_event: EventCallback | None
    ) -> list[Message]:
        """Run one assistant turn's calls concurrently; results keep the calls' order."""
        context = ToolContext(
            session_id=session.id,
            session_key=session.session_key,
            store=self.store,
            memory=self.memory,
            skills_dir=self.skills_dir,
        )
        allowed = {tool["name"] for tool in session.tools}

        async def run(call: ToolCall) -> Message:
            if on_event is not None:
                await on_event(ToolStarted(call.name, call.arguments_json))
            result = await run_tool(self.registry, call, context, allowed)
            if on_event is not None:
                await on_event(ToolFinished(call.name, result.is_error))
            return self.with_payload(result)

        return list(await asyncio.gather(*(run(call) for call in calls)))


def _title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
