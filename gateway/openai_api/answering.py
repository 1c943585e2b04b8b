"""One request of the OpenAI-compatible API answered: its conversation found (or branched), one turn run
as every chat's turn is, the answer handed to the client.

This is a path beside the chat road (inbox, lanes, outbox), not through it, because an HTTP request is
its own delivery: the answer goes back on the connection that asked, so there is nothing to queue and
nothing to redeliver after a restart (the client's connection died with the process; it asks again).
What every turn must pass, it passes here the same way:

- **one turn at a time per session**: the turn holds the session's lease (``agent.locks``: across
  processes too) from finding the conversation to recording where it stands; a second request for the
  same history waits for it, then finds the history moved on and branches;
- **access and rights**: the key's person must be allowed (``gateway.access``: an ``api:NAME`` person by
  their key, anyone else as on their own platform), the session's memory is theirs
  (``gateway.conversation.addressing.person_scope``) and every tool call is put to their rights of the
  moment (``gateway.rights``: ``tools_for_guests`` for everyone but admins);
- **spend limits**: the bot, the conversation and the person (``gateway.budgets``), checked before the
  turn and before every model request of it; a refusal is a 429 with the limit's line;
- **the model's window**: a new message that would not fit it even with nothing but the conversation's
  prompt is a 400 ``context_length_exceeded`` before any model is asked (compression shortens a history,
  never the message);
- **the cache discipline**: a conversation is a stored session re-sent byte for byte; the client's
  history is only ever matched against it (``gateway.openai_api.transcript``), never written into it,
  except once, when a history Herald does not hold starts a new session (``Agent.import_history``).

How a request's history is matched: every session of the API records the digest of the history its
client holds (``gateway.openai_api.conversations``). A request whose history before its new message
has that digest continues that session (its stored prompt and history are re-sent, so the provider's
cache keeps serving them). Anything else — a new conversation, a changed system message, an edited or
regenerated earlier message, a history from another client — starts a new session whose history is
the client's (a branch): stored history is never rewritten, and the line it branched from stays as it
was, for the client to go back to.

A client that goes away before its answer is delivered (a closed connection, a stop button) cancels
the turn (what it cost is recorded) and the turn is withdrawn from the session (kept in the database,
out of the conversation), so the session is again at the history the client holds; a shutdown does the
same. Failures before anything was streamed are HTTP errors; after, an error event in the stream.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from adapters.base import ChatType
from agent.api import (
    CompressionOutcome,
    Lease,
    ProviderError,
    Refusal,
    Retrying,
    SessionRecord,
    SessionSpec,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnEvent,
    TurnResult,
    Usage,
    prompt_tokens_with,
)
from agent.db import FencedOut, StorageUnavailable
from agent.memory import OWNER_SCOPE
from gateway.access.auth import Speaker
from gateway.chats import API, new_api_session_key, parse_session_key
from gateway.conversation.addressing import person_scope
from gateway.conversation.context import TurnServices
from gateway.conversation.envelope import TurnRequest, run_turn
from gateway.conversation.turns import turn_rights, why_replaced
from gateway.cron.tool import TOOLSET as CRON_TOOLSET
from gateway.openai_api.conversations import Conversations
from gateway.openai_api.keys import Caller
from gateway.openai_api.transcript import Transcript
from gateway.openai_api.wire import ApiError, bad_request
from gateway.rights import Rights

PROMPT_HINT = (  # how to write here: stable prompt layer, the same text for every API conversation
    "You are answering through an OpenAI-compatible API: a chat application (such as Open WebUI or "
    "LibreChat) or a program shows your answer, usually rendering Markdown."
)

log = logging.getLogger(__name__)

API_META = "api_request"  # stored with the turn's user message: the request it answers
NO_RETRY = {"x-should-retry": "false"}  # OpenAI's SDKs read it: Herald retried what could be retried
BREAK = "\n\n"


class ClientGone(Exception):
    """The client's connection closed before its answer was delivered."""


class Output(Protocol):
    """Where a request's answer goes (``gateway.openai_api.server``): streamed text as it comes, then
    the end of the answer."""

    async def text(self, delta: str) -> None:
        """More of the answer (a streaming request shows it at once). Never raises: a client that went
        away is noticed by whoever watches the request, which cancels the turn."""

    async def deliver(self, answer: str, usage: Usage) -> None:
        """The end of the answer (all of it, for a request that does not stream). Raises
        :class:`ClientGone` when it could not be handed over."""


class AnswerText:
    """The answer as its client gets it, built from a turn's events: the text of every model response of
    the turn (what the model says before it uses tools too), a blank line between responses. With
    ``retractable`` (nothing is shown before the end), a response the provider restarts is taken back;
    a streamed one cannot be, so the restart begins after a blank line. ``trusted`` is asked before each
    piece is handed on: once it says no (the lease may have lapsed, the person lost access) nothing
    more is."""

    def __init__(
        self,
        forward: Callable[[str], Awaitable[None]],
        *,
        retractable: bool,
        trusted: Callable[[], bool] = lambda: True,
    ) -> None:
        self.forward = forward
        self.retractable = retractable
        self.trusted = trusted
        self.text = ""
        self._response_start = 0  # where the text of the model response now streaming began
        self._new_response = False  # the next text starts a new model response
        self._stopped = False

    async def on_event(self, event: TurnEvent) -> None:
        if isinstance(event, ToolStarted | ToolFinished):
            self._new_response = True
        elif isinstance(event, Retrying) and event.discard_partial:
            if self.retractable:
                self.text = self.text[: self._response_start]
            self._new_response = True
        elif isinstance(event, TextDelta) and event.text:
            piece = event.text
            if self._new_response:
                self._new_response = False
                if self.text and not self.text.endswith(BREAK):
                    piece = BREAK + piece.lstrip("\n")
                self._response_start = len(self.text)
            await self.add(piece)

    async def add(self, piece: str) -> None:
        self.text += piece
        if self._stopped or not self.trusted():
            self._stopped = True
            return
        await self.forward(piece)

    async def finish(self, result: TurnResult) -> str:
        """The whole answer: what came, the turn's answer if no text came at all, its notices after (a
        fallback model's line, an answer cut off)."""
        if not self.text.strip() and result.text.strip():
            await self.add(result.text)
        for notice in result.notices:
            await self.add(f"{BREAK}ℹ️ {notice}")
        return self.text


def refused(refusal: Refusal, line: str, now: float) -> ApiError:
    """A spend limit's refusal: 429 with the limit's line; a limit used up is not to be retried before its
    window resets (a request that only would have crossed it may be retried smaller: no Retry-After)."""
    headers = dict(NO_RETRY)
    end = refusal.window.end
    if end is not None and refusal.used_up:
        headers["Retry-After"] = str(max(1, math.ceil(end - now)))
    return ApiError(429, line, kind="insufficient_quota", code="spend_limit", headers=headers)


@dataclass(frozen=True)
class ApiRequest:
    """One request to answer: who asks (their key's person), what (the conversation), where to."""

    caller: Caller
    transcript: Transcript
    conversation: str | None  # the client's conversation id, when it sends one
    output: Output
    request_id: str  # stored with the turn's user message (the turn is found by it to withdraw it)
    streaming: bool


@dataclass(frozen=True)
class Standing:
    """The caller as the gateway sees them now: where they talk from, whether an admin, their rights."""

    speaker: Speaker
    is_admin: bool
    rights: Rights


class ApiTurns:
    """Runs the API's turns, each in the turn's envelope (``gateway.conversation.envelope``): under a slot
    of the one turn cap that chats and cron take too."""

    def __init__(self, services: TurnServices, conversations: Conversations) -> None:
        self.services = services
        self.conversations = conversations

    async def answer(self, request: ApiRequest) -> None:
        """Answer the person's new message into ``request.output``. Raises :class:`ApiError` (nothing was
        delivered), :class:`ClientGone`, or cancellation (the turn was withdrawn)."""
        label = request.caller.label
        try:
            await self._answer(request)
        except ProviderError as error:  # the session's provider cannot be used (its key is missing ...)
            log.error("api %s: not answered: %s", label, error)
            raise ApiError(
                502, f"No answer: {error}", kind="api_error", code="model_error", headers=NO_RETRY
            ) from None
        except (StorageUnavailable, FencedOut) as error:
            log.warning("api %s: not answered: %s", label, error)
            raise ApiError(
                503,
                "Herald's database cannot be reached just now; please send the request again.",
                kind="api_error",
                code="unavailable",
                headers={"Retry-After": "5"},
            ) from None

    async def _answer(self, request: ApiRequest) -> None:
        services = self.services
        started = time.time()
        services.metrics.messages_in.labels(API).inc()
        standing = await self._standing(request.caller)
        async with self._conversation(request, standing.rights) as (lease, session):
            services.reviews.cancel(session.session_key)  # a live turn never waits for a background review
            await self._turn(ApiTurn(self, request, standing, lease, session, started))

    async def _standing(self, caller: Caller) -> Standing:
        """The caller's standing; a 403 when their person may not use the bot (now)."""
        authorizer = self.services.authorizer
        speaker = Speaker(caller.platform, caller.user_id, chat_id=API, chat_type=ChatType.DIRECT)
        if not await authorizer.is_allowed(speaker):
            raise forbidden(caller)
        is_admin = authorizer.is_admin(caller.platform, caller.user_id)
        scope = person_scope(caller.platform, caller.user_id, is_admin=is_admin)
        return Standing(speaker, is_admin, turn_rights(self.services, speaker, scope))

    async def _turn(self, turn: ApiTurn) -> None:
        """The turn itself, under the session's lease: checked against the model's window, run in the
        envelope; withdrawn (and the tip put back) when its answer was not delivered."""
        services = self.services
        session, request = turn.session, turn.request
        window = services.runtime.config.model_info(session.model).context_length
        needed = prompt_tokens_with(session, request.transcript.message)
        if needed > window:  # compression shortens a history, never the new message: no model could take it
            raise too_long(needed, window)
        charge = services.budgets.for_person(request.caller.person, session.session_key,
                                             is_admin=turn.standing.is_admin)  # fmt: skip
        try:
            await run_turn(services, turn, charge)
        except asyncio.CancelledError:
            if turn.started and not turn.delivered:
                await asyncio.shield(turn.withdraw())
                services.metrics.turns.labels("cancelled").inc()
            raise


    @asynccontextmanager
    async def _conversation(
        self, request: ApiRequest, rights: Rights
    ) -> AsyncIterator[tuple[Lease, SessionRecord]]:
        """The session of the request's history, its lease held: the one whose client holds exactly that
        history (checked again under the lease: another request may have moved it on meanwhile), else a
        new one with the client's history (a branch)."""
        runtime = self.services.runtime
        tip = request.transcript.prefix_digest
        key = await self.conversations.find(request.caller.person, request.conversation, tip)
        if key is not None:
            async with runtime.locks.hold(key) as lease:
                session = await self._still_at(key, tip, rights)
                if session is not None:
                    yield lease, session
                    return
        key = new_api_session_key()
        async with runtime.locks.hold(key) as lease:
            yield lease, await self._branch(lease, key, request, rights)

    async def _still_at(self, key: str, tip: str, rights: Rights) -> SessionRecord | None:
        """The session of ``key`` if its client still holds ``tip`` and it still fits the person's rights
        (its memory, its frozen tools: ``gateway.conversation.turns.current_session``)."""
        if await self.conversations.tip(key) != tip:
            return None
        session = await self.services.runtime.store.sessions.latest(key)
        if session is None:
            return None
        taken = rights.taken_away(tool["name"] for tool in session.tools)
        if why_replaced(session.memory_scope, rights.memory_scope, taken) is not None:
            log.info("api session %s no longer fits its person's rights; a new one goes on", session.id)
            await self.conversations.move(key, None)  # for good: the new one continues from here
            return None
        return session

    async def _branch(self, lease: Lease, key: str, request: ApiRequest, rights: Rights) -> SessionRecord:
        """A new session for ``key`` with the client's instructions and history, recorded at that history."""
        runtime = self.services.runtime
        caller, transcript = request.caller, request.transcript
        spec = SessionSpec(
            session_key=key,
            source=API,
            platform=API,
            memory_scope=rights.memory_scope,
            chat_id=parse_session_key(key).ident,
            user_id=caller.user_id,
            platform_hint=PROMPT_HINT,
            instructions=transcript.instructions,
            toolsets_left_out=toolsets_left_out(rights.memory_scope),
        )
        lease.check(key)
        started = await runtime.new_session(spec)
        for warning in started.warnings:
            log.warning("session %s: %s", started.record.id, warning)
        history = [(turn.role, turn.text) for turn in transcript.history]
        await runtime.agent.import_history(lease, started.record, history)
        await self.conversations.start(key, caller.person, request.conversation, transcript.prefix_digest)
        log.info("api %s: session %s starts a conversation%s", caller.label, started.record.id,
                 f" with a history of {len(history)} messages" if history else "")  # fmt: skip
        return started.record

    async def withdraw(self, lease: Lease, session: SessionRecord, meta: dict[str, str], tip: str) -> None:
        """Take an undelivered turn out of the conversation, so its client is again at ``tip``; if the turn
        cannot be found, the session matches no client's history any more."""
        try:
            withdrawn = await self.services.runtime.agent.withdraw_turn(lease, session, meta)
            await self.conversations.move(session.session_key, tip if withdrawn else None)
        except (StorageUnavailable, FencedOut) as error:
            log.warning("session %s: an undelivered turn stays in the conversation: %s", session.id, error)


class ApiTurn:
    """An API request's channel of the turn's envelope: the answer built from the turn's events (streamed
    as it comes, for a streaming request), the conversation's new tip recorded, the answer handed to the
    client; a refusal, a failure or a revoked key an HTTP error. The tip moves before the answer is handed
    over: a client may send its next request the moment it has the answer, and that request must find the
    session (it then waits for this lease)."""

    reviewed = True
    capped = True

    def __init__(
        self,
        turns: ApiTurns,
        request: ApiRequest,
        standing: Standing,
        lease: Lease,
        session: SessionRecord,
        started_at: float,
    ) -> None:
        self.turns = turns
        self.services = turns.services
        self.request = request
        self.standing = standing
        self.lease = lease
        self.session = session
        self.started_at = started_at
        self.meta = {API_META: request.request_id}
        self.before = request.transcript.prefix_digest  # the tip the client holds
        rights = standing.rights
        self.answer = AnswerText(
            request.output.text,
            retractable=not request.streaming,
            trusted=lambda: lease.trusted() and rights.still_allowed(),
        )
        self.started = False  # the turn began (a cancelled one is withdrawn)
        self.delivered = False

    @asynccontextmanager
    async def around(self) -> AsyncIterator[TurnRequest]:
        self.started = True
        caller = self.request.caller
        yield TurnRequest(
            self.lease,
            self.session,
            self.request.transcript.message,
            what=f"api {caller.label}",
            meta=self.meta,
            on_compressed=log_compression(caller),
            on_event=self.answer.on_event,
            gate=self.standing.rights,
        )

    async def ending(self, result: TurnResult) -> None:
        return None

    async def lost_access(self) -> bool:
        if await self.services.authorizer.is_allowed(self.standing.speaker):
            return False
        await self.withdraw()
        raise forbidden(self.request.caller)

    async def refused(self, refusal: Refusal) -> None:
        services = self.services
        services.metrics.turns.labels("refused").inc()
        raise refused(refusal, services.budgets.line(refusal), time.time())

    async def failed(self, result: TurnResult) -> None:
        self.services.metrics.turns.labels("failed").inc()
        raise ApiError(502, result.error or "", kind="api_error", code="model_error", headers=NO_RETRY)

    async def answered(self, result: TurnResult) -> None:
        metrics = self.services.metrics
        text = await self.answer.finish(result)
        await self.turns.conversations.move(self.session.session_key, self.request.transcript.answered(text))
        try:
            await self.request.output.deliver(text, result.usage)
        except ClientGone:
            await self.withdraw()
            metrics.turns.labels("cancelled").inc()
            raise
        self.delivered = True
        metrics.turns.labels("answered").inc()
        metrics.turn_seconds.observe(time.time() - self.started_at)

    async def withdraw(self) -> None:
        """Take the undelivered turn out of the conversation (``ApiTurns.withdraw``)."""
        await self.turns.withdraw(self.lease, self.session, self.meta, self.before)


def toolsets_left_out(memory_scope: str) -> tuple[str, ...]:
    """What a conversation of the API is not offered. A conversation is no chat to post into, and a guest's
    job may post only into the chat it was made in (``gateway.cron.manage``): the cron tool could never
    succeed for them. The owner names a target chat, and keeps it."""
    return () if memory_scope == OWNER_SCOPE else (CRON_TOOLSET,)


def too_long(needed: int, window: int) -> ApiError:
    """OpenAI's own answer to a prompt past the model's window (its SDKs and clients know the code)."""
    return bad_request(
        f"This model's maximum context length is {window:,} tokens. However, your messages resulted in about "
        f"{needed:,} tokens (the last message with this conversation's prompt). Please reduce the length of "
        "the messages.",
        param="messages",
        code="context_length_exceeded",
    )


def forbidden(caller: Caller) -> ApiError:
    return ApiError(
        403,
        f"The key's person ({caller.person}) may not use this bot: they are not on its allowlists or "
        "their access was revoked.",
        kind="permission_error",
        code="not_allowed",
    )


def log_compression(caller: Caller) -> Callable[[CompressionOutcome], Awaitable[None]]:
    """What a conversation's compression tells: a line in the log (the client's history is unchanged)."""

    async def compressed(outcome: CompressionOutcome) -> None:
        log.info("api %s: %s", caller.label, outcome.line())

    return compressed
