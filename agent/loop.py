"""The tool loop: one user turn → model calls and tool runs until the model answers.

History discipline (docs/ARCHITECTURE.md, invariant 3): messages are only ever appended. An assistant
message that calls tools is stored together with all its results in one transaction, so the stored
history never has a dangling tool call. A turn that could not be answered — the provider failed for
good, the response was unusable, the consumer of the turn's events failed — is taken out of the
conversation (kept in the database, marked inactive), so the next request's prefix is exactly what the
cache already holds and the user can simply send the message again. A turn that a killed process left
without its answer is closed the same way before anything else touches the session
(:meth:`Agent.close_interrupted_turn`). No exception other than cancellation (and a database that
cannot be used, ``agent.db.errors``) leaves :meth:`Agent.run_turn`; a cancelled turn still records
what its stopped model call cost.

A request over a spend limit is not sent (``agent.model_calls``): the turn ends there, before that
request, and is closed like a failed one, with ``TurnResult.refused`` saying which limit; whatever its
earlier requests answered was complete (never a half-written answer).

An answer cut off by ``max_tokens`` is never passed off as complete: by ``agent.on_max_tokens`` the
model is asked once to continue, and an answer still cut off comes with a one-line notice. So does an
answer that a fallback model gave because the session's own was failing (``agent.failover``).

Every operation on a session needs a :class:`agent.locks.Lease` on the session's key: one turn at a
time per session, everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.agent_settings import AgentSettings
from agent.cache_policy import PACING_REQUESTS, PACING_WINDOW, Ttl, choose_ttls
from agent.compression.engine import CompressionOutcome, ContextEngine
from agent.events import (
    Compressed,
    EventCallback,
    EventConsumerFailed,
    EventPump,
    FailingOver,
    Retrying,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from agent.failover import failover_line
from agent.files.text import valid_text
from agent.history import CONTINUATION_MARK, IMPORTED_MARK, is_final_answer, turn_marked, unanswered_turn
from agent.locks import Lease
from agent.memory import OWNER_SCOPE, MemoryBank
from agent.model.media import Media
from agent.model.messages import Message, Role, ToolCall
from agent.model.provider import FailedOver, Provider, ProviderError, ProviderRequest, ProviderResponse
from agent.model_calls import ModelCalls
from agent.models import ModelInfo
from agent.providers.pool import ProviderPool
from agent.providers.retry import user_facing_error
from agent.side import delegate_for
from agent.skills import SkillLibrary
from agent.spending.gate import OverBudget, Refusal
from agent.store import SessionRecord, SessionStore
from agent.tool_runs import run_tool_calls, with_payload
from agent.tools.approval import Approver
from agent.tools.registry import OPEN, ToolContext, ToolGate, ToolRegistry
from agent.usage import Usage

log = logging.getLogger(__name__)

TITLE_CHARS = 60
CANCELLED_NOTE = "(The user cancelled this turn.)"
CONTINUE_PROMPT = (
    "[Herald: your answer was cut off by the output token limit. Continue exactly where it stopped, "
    "without repeating anything.]"
)
CUT_OFF_NOTICE = (
    "The answer was cut off at the model.max_tokens limit of {limit:,} tokens; for longer answers "
    "raise it in config.yaml (herald config set model.max_tokens {more})."
)
SPEND_CUT_NOTICE = "The answer was cut short: the spend limits could pay for only {limit:,} tokens of it."


@dataclass(frozen=True)
class TurnResult:
    text: str
    usage: Usage
    iterations: int
    error: str | None = None  # one sentence for the user when no answer could be produced
    notices: tuple[str, ...] = ()  # a line each about the answer that came (a fallback's, cut off)
    refused: Refusal | None = None  # the spend limit that stopped the turn before its next request


class Agent:
    """Runs turns of stored sessions. Holds no per-session state: everything lives in the store.

    Each session's requests go to the client for the session's own provider and model (from
    ``pool``), through ``calls`` (the spend gate, retries and the usage record).
    """

    def __init__(
        self,
        *,
        store: SessionStore,
        pool: ProviderPool,
        registry: ToolRegistry,
        memory: MemoryBank,
        skills: SkillLibrary,
        model_info: Callable[[str], ModelInfo],
        settings: AgentSettings,
        calls: ModelCalls,
        context_engine: ContextEngine | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.pool = pool
        self.registry = registry
        self.memory = memory
        self.skills = skills
        self.model_info = model_info
        self.settings = settings
        self.calls = calls
        self.context_engine = context_engine
        self.clock = clock

    def provider_for(self, session: SessionRecord) -> Provider:
        """The client of the session's own provider and model (raises ProviderError if unusable)."""
        return self.pool.for_session(session.provider, session.model)

    async def run_turn(
        self,
        lease: Lease,
        session: SessionRecord,
        text: str,
        on_event: EventCallback | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        gate: ToolGate = OPEN,
        purpose: str = "turn",
        media: Sequence[Media] = (),
        approver: Approver | None = None,
    ) -> TurnResult:
        """Answer ``text`` in ``session``. Cancel the task running this to stop the turn.

        ``media`` are prepared images and documents the user sent with ``text`` (``agent.media``): they
        are stored once with the user message and re-sent with it on every later request.
        ``meta`` is stored with the user message (the gateway records which inbox row it answers).
        ``gate`` is asked before each tool call (and each of its sub-agents'): the caller's current
        rights, and tools this turn may not use although the session advertises them.
        ``purpose`` is what the turn's requests are recorded as (``herald insights`` attributes cost
        by it): "turn" for a chat's own turns, "cron" for a scheduled job's run.
        ``approver`` is asked before a dangerous action of the turn's own tool calls (not its
        sub-agents'): None, and such actions are refused (``agent.tools.approval``).
        """
        lease.check(session.session_key)
        text = valid_text(text)  # from a terminal, a platform: stored and sent, so it must encode
        pump = EventPump(on_event)
        turn_ids: list[int] = []
        total = Usage()
        iteration = 0
        answered = False  # the turn's final assistant message is stored: nothing left to close
        continued = False  # an answer cut off by max_tokens was continued (once per turn)
        parts: list[str] = []  # the text of a continued answer so far
        failovers: list[FailedOver] = []  # the turn's requests a fallback model answered
        try:
            provider = self.provider_for(session)
            history = await self._settled_history(session)
            if not history and not session.title:
                await self.store.sessions.set_title(session.id, _title_from(text))
            [user_message] = await self.store.messages.append(
                session.id,
                [
                    with_payload(
                        provider,
                        Message(role="user", content=text, meta=dict(meta or {}), media=tuple(media)),
                    )
                ],
            )
            messages = [*history, user_message]
            turn_ids.append(_id(user_message))
            prefix_ttl, tail_ttl = await self.ttls_for(session)
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
                response = await self._complete(provider, session, request, pump, purpose)
                total += response.usage
                if response.failed_over is not None:
                    failovers.append(response.failed_over)
                pump.check()
                if (
                    response.cut_off
                    and response.max_tokens is None  # cut by the spend limits: no more can be paid
                    and self.settings.on_max_tokens == "continue"
                    and not continued
                ):
                    continued = True
                    parts.append(response.text)
                    stored = await self.store.messages.append(
                        session.id, [with_payload(provider, m) for m in continuation(response.text)]
                    )
                    messages.extend(stored)
                    turn_ids.extend(_id(m) for m in stored)
                    continue
                if response.cut_off or not response.tool_calls:  # a cut-off call may be incomplete
                    final = Message(role="assistant", content=response.text)
                    stored = await self.store.messages.append(session.id, [with_payload(provider, final)])
                    turn_ids.extend(_id(m) for m in stored)
                    answered = True
                    await self._maybe_compress(session, [*messages, *stored], response, pump)
                    await pump.flush()
                    cut_off = self._cut_off_notice(response) if response.cut_off else None
                    return TurnResult(
                        text="".join([*parts, response.text]),
                        usage=total,
                        iterations=iteration,
                        notices=_lines(failover_line(failovers), cut_off),
                    )
                parts = []
                assistant = with_payload(
                    provider, Message(role="assistant", content=response.text, tool_calls=response.tool_calls)
                )
                results = await self._run_tools(provider, session, response.tool_calls, pump, gate, approver)
                stored = await self.store.messages.append(session.id, [assistant, *results])
                messages.extend(stored)
                turn_ids.extend(_id(m) for m in stored)
                if not continued:  # a continued turn keeps its start in view (agent.history)
                    messages = await self._maybe_compress(session, messages, response, pump)
                pump.check()
            note = (
                f"(I stopped after {self.settings.max_iterations} tool steps without a final answer. "
                "Say 'continue' to let me go on.)"
            )
            await self.store.messages.append(
                session.id, [with_payload(provider, Message(role="assistant", content=note))]
            )
            answered = True
            await pump.flush()
            notices = _lines(failover_line(failovers))
            return TurnResult(text=note, usage=total, iterations=iteration, notices=notices)
        except OverBudget as refusal:  # the request that would have crossed a limit was not sent
            log.info("session %s: turn stopped before request %d: %s", session.id, iteration, refusal)
            result = await self._fail(session, turn_ids, total, iteration, str(refusal), pump)
            return replace(result, refused=refusal.refusal)
        except ProviderError as error:
            sentence = user_facing_error(error, attempts=error.attempts)
            log.error("session %s: turn failed: %s (%s)", session.id, error, error.kind)
            return await self._fail(session, turn_ids, total, iteration, sentence, pump)
        except EventConsumerFailed as error:
            sentence = f"The answer could not be delivered ({error}); please send your message again."
            log.error("session %s: turn failed: the event consumer raised %s", session.id, error)
            return await self._fail(session, turn_ids, total, iteration, sentence, pump)
        except asyncio.CancelledError:
            await pump.aclose()
            if turn_ids and not answered:
                closing = Message(role="assistant", content=CANCELLED_NOTE)
                marker = with_payload(self.provider_for(session), closing)
                await asyncio.shield(self.store.messages.append(session.id, [marker]))
            raise

    def _cut_off_notice(self, response: ProviderResponse) -> str:
        if response.max_tokens is not None:
            return SPEND_CUT_NOTICE.format(limit=response.max_tokens)
        return CUT_OFF_NOTICE.format(limit=self.settings.max_tokens, more=self.settings.max_tokens * 2)

    async def close_interrupted_turn(self, lease: Lease, session: SessionRecord) -> int:
        """Close the session's last turn if it was never answered; returns how many messages it had.

        A process killed mid-turn leaves the user's message (and maybe tool steps) without an answer;
        the next turn would send two user messages in a row. The turn is closed the way a failed turn
        is: its messages leave the conversation, kept in the database. :meth:`run_turn`,
        :meth:`compress` and :meth:`hygiene` do this themselves; call it to tell the user at start-up.
        """
        lease.check(session.session_key)
        messages = await self.store.messages.load(session.id)
        return len(messages) - len(await self._settle(session, messages))

    async def earlier_attempt(
        self, lease: Lease, session: SessionRecord, meta: Mapping[str, Any]
    ) -> str | None:
        """What an earlier attempt at the turn whose user message carried ``meta`` left behind (a process
        that stopped or crashed after starting it): its finished answer, to deliver as it is, or None.

        A half-done attempt (no final answer, or one cut off by a shutdown) is taken out of the
        conversation first (kept in the database), so the turn can be run again on a valid history.
        """
        lease.check(session.session_key)
        history = await self.store.messages.load(session.id)
        turn = turn_marked(history, meta)
        if turn is None:
            return None
        last = turn[-1]
        if len(turn) > 1 and is_final_answer(last) and last.content != CANCELLED_NOTE:
            log.info(
                "session %s: a turn finished before a restart; its answer is delivered as it is", session.id
            )
            return last.content
        await self.store.messages.deactivate([_id(m) for m in turn], "interrupted_by_restart")
        log.info(
            "session %s: closed an interrupted turn (%d messages) before running it again",
            session.id,
            len(turn),
        )
        return None

    async def import_history(
        self, lease: Lease, session: SessionRecord, turns: Sequence[tuple[Role, str]]
    ) -> None:
        """Give a new session the conversation a client held before it came here.

        A client of the OpenAI-compatible API sends its whole history with every request; a history
        this server never saw (or one the person edited) becomes a session of its own, whose history
        is the client's. ``turns`` are (role, text): user and assistant in turn, from the user's first
        message to the assistant's last answer. They are stored as they will be sent, before the
        session's first turn; only a session without messages takes them (history is append-only).
        """
        lease.check(session.session_key)
        roles = [role for role, _ in turns]
        if roles != ["user", "assistant"] * (len(roles) // 2):
            raise ValueError("an imported history alternates user and assistant, from user to assistant")
        if await self.store.messages.load(session.id, include_inactive=True):
            raise ValueError(f"session {session.id} has messages already: a history goes into a new one")
        if not turns:
            return
        provider = self.provider_for(session)
        messages = [
            with_payload(provider, Message(role=role, content=valid_text(text), meta={IMPORTED_MARK: True}))
            for role, text in turns
        ]
        await self.store.messages.append(session.id, messages)
        if not session.title:
            await self.store.sessions.set_title(session.id, _title_from(turns[0][1]))

    async def withdraw_turn(self, lease: Lease, session: SessionRecord, meta: Mapping[str, Any]) -> bool:
        """Take the turn whose user message carried ``meta`` out of the conversation (kept in the
        database), answered or not: its answer never reached the person (their client went away), so
        the conversation goes on from before it, as they saw it. False when the history has no such
        turn any more (compression folded it into a summary)."""
        lease.check(session.session_key)
        turn = turn_marked(await self.store.messages.load(session.id), meta)
        if turn is None:
            return False
        await self.store.messages.deactivate([_id(m) for m in turn], "turn_withdrawn")
        log.info("session %s: a turn whose answer was not delivered was withdrawn (%d messages)",
                 session.id, len(turn))  # fmt: skip
        return True

    async def _settled_history(self, session: SessionRecord) -> list[Message]:
        return await self._settle(session, await self.store.messages.load(session.id))

    async def _settle(self, session: SessionRecord, messages: list[Message]) -> list[Message]:
        """``messages`` with an interrupted turn closed (see :meth:`close_interrupted_turn`)."""
        dangling = unanswered_turn(messages)
        if not dangling:
            return messages
        await self.store.messages.deactivate([_id(m) for m in dangling], "turn_interrupted")
        log.info("session %s: closed a turn interrupted before its answer", session.id)
        return messages[: len(messages) - len(dangling)]

    async def _fail(
        self,
        session: SessionRecord,
        turn_ids: list[int],
        total: Usage,
        iteration: int,
        sentence: str,
        pump: EventPump,
    ) -> TurnResult:
        """End the turn as failed: its messages leave the conversation, the user gets one sentence."""
        await pump.aclose()
        if turn_ids:
            await self.store.messages.deactivate(turn_ids, "turn_failed")
        return TurnResult(text="", usage=total, iterations=iteration, error=sentence)

    async def _maybe_compress(
        self, session: SessionRecord, messages: list[Message], response: ProviderResponse, pump: EventPump
    ) -> list[Message]:
        """Let the context engine compress; returns the history to use from here on."""
        if self.context_engine is None:
            return messages
        outcome = await self.context_engine.after_response(session, messages, response.usage)
        if outcome is None or outcome.method in ("failed", "skipped"):
            return messages
        pump.emit(Compressed(outcome))
        return await self.store.messages.load(session.id)

    async def compress(self, lease: Lease, session: SessionRecord) -> CompressionOutcome | None:
        """Compress now (``/compress``), whatever the thresholds say."""
        lease.check(session.session_key)
        if self.context_engine is None:
            return None
        current, messages = await self._current(session)
        return await self.context_engine.compress(
            current, messages, prompt_tokens=current.last_prompt_tokens, force=True
        )

    async def hygiene(self, lease: Lease, session: SessionRecord) -> CompressionOutcome | None:
        """Session hygiene, called before a turn: compress a session that grew too large."""
        lease.check(session.session_key)
        if self.context_engine is None:
            return None
        current, messages = await self._current(session)
        return await self.context_engine.hygiene(current, messages)

    async def _current(self, session: SessionRecord) -> tuple[SessionRecord, list[Message]]:
        """The session's stored state now (a caller's record may predate the last turn's usage), with
        an interrupted turn closed."""
        current = await self.store.sessions.get(session.id) or session
        return current, await self._settled_history(session)

    async def _complete(
        self,
        provider: Provider,
        session: SessionRecord,
        request: ProviderRequest,
        pump: EventPump,
        purpose: str,
    ) -> ProviderResponse:
        streamed = False

        async def on_text(delta: str) -> None:
            nonlocal streamed
            streamed = True
            pump.emit(TextDelta(delta))

        async def on_retry(attempt: int, delay: float, error: ProviderError) -> None:
            nonlocal streamed
            pump.emit(Retrying(attempt, delay, str(error), discard_partial=streamed))
            streamed = False

        async def on_failover(failover: FailedOver) -> None:
            nonlocal streamed
            pump.emit(FailingOver(failover.fallback, failover.line, discard_partial=streamed))
            streamed = False

        return await self.calls.complete(
            provider,
            request,
            session=session,
            purpose=purpose,
            policy=self.settings.retry,
            on_text=on_text,
            on_retry=on_retry,
            on_failover=on_failover,
        )

    async def ttls_for(self, session: SessionRecord) -> tuple[Ttl, Ttl]:
        """The (prefix, tail) TTLs of the session's next requests, by how its chat is paced
        (``agent.cache_policy.choose_ttls``)."""
        now = self.clock()
        recent = await self.store.usage.chat_request_times(
            session.session_key, since=now - PACING_WINDOW, limit=PACING_REQUESTS
        )
        return choose_ttls(self.settings.cache_ttl, recent, now)

    async def _run_tools(
        self,
        provider: Provider,
        session: SessionRecord,
        calls: tuple[ToolCall, ...],
        pump: EventPump,
        gate: ToolGate,
        approver: Approver | None,
    ) -> list[Message]:
        """Run one assistant turn's calls concurrently; results keep the calls' order."""
        context = self.tool_context(session, depth=0, gate=gate, approver=approver)

        def notify(call: ToolCall, result: Message | None) -> None:
            if result is None:
                pump.emit(ToolStarted(call.name, call.arguments_json))
            else:
                pump.emit(ToolFinished(call.name, result.is_error))

        advertised = {tool["name"] for tool in session.tools}
        return await run_tool_calls(
            self.registry, provider, calls, context, advertised=advertised, notify=notify
        )

    def tool_context(
        self, session: SessionRecord, *, depth: int, gate: ToolGate = OPEN, approver: Approver | None = None
    ) -> ToolContext:
        """What the session's tools may touch; ``depth`` counts how deep in delegation the caller is,
        ``gate`` is asked before each call (its sub-agents' calls too), ``approver`` before a dangerous
        action (only the turn's own calls: a sub-agent has none)."""
        return ToolContext(
            session_id=session.id,
            session_key=session.session_key,
            store=self.store,
            memory=self.memory.store(session.memory_scope),
            skills=self.skills,
            payer=self.calls,
            delegate=delegate_for(self, session, depth, gate),
            trusted=session.memory_scope == OWNER_SCOPE,
            gate=gate,
            approver=approver,
        )


def continuation(cut_off_text: str) -> list[Message]:
    """The answer cut off by ``max_tokens`` and the request to go on, stored as part of the turn."""
    return [
        Message(role="assistant", content=cut_off_text),
        Message(role="user", content=CONTINUE_PROMPT, meta={CONTINUATION_MARK: True}),
    ]


def _lines(*lines: str | None) -> tuple[str, ...]:
    return tuple(line for line in lines if line)


def _id(message: Message) -> int:
    assert message.id is not None, "stored messages have ids"
    return message.id


def _title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
