"""Answering one stored message: session, hygiene, the agent's turn, the answer queued for delivery.

Everything here happens while holding the session's lock (one turn at a time per session, across
processes). The turn's user message carries the inbox row's id, so a restart can tell what a crash
left behind: a turn that finished but was not queued is delivered as it is; a turn cut off half-way is
closed the way a failed turn is (its messages leave the conversation, so the history stays valid and
the prefix stays cached) and answered again.

Every model request of a turn is charged to the bot, the chat and the person who wrote
(``gateway.budgets``): a message over one of their spend limits starts no turn, a turn that reaches one
stops before its next request, and the chat is told once per limit and window when the limit is used
up, each time when only that request would have crossed it (:func:`refuse`).

An answer to be spoken (``gateway.speech``: a voice note answered with one) is not streamed; its voice
note is made inside the turn's charge, while "typing…" still shows, and queued with the text (or in
place of it) in the transaction that closes the row.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial

from adapters.base import InboundMessage, OutboundText
from agent.api import (
    CompressionOutcome,
    Lease,
    OverBudget,
    Refusal,
    SessionRecord,
    SessionSpec,
    StartedSession,
    TurnResult,
    charging,
)
from agent.db import FencedOut, StorageUnavailable
from agent.memory import OWNER_SCOPE
from gateway.access.auth import Speaker, speaker_of
from gateway.chats import person_id, reply_address
from gateway.conversation.addressing import session_spec, user_text
from gateway.conversation.context import ChatServices, TurnServices
from gateway.conversation.envelope import Settled, TurnRequest, run_turn
from gateway.conversation.media import MessageRefused
from gateway.delivery.stream import ReplyStream
from gateway.intake.lanes import INTERRUPTED
from gateway.intake.pending import hold_pending
from gateway.ledger.inbox import InboxRow, InboxState, NoLongerPending
from gateway.ledger.outbox import Operation, Outgoing
from gateway.rights import Rights, rights_for

log = logging.getLogger(__name__)

INBOX_META = "inbox"
STOPPED_SUFFIX = "\n\n(stopped)"
UNEXPECTED = "something went wrong on our side (the details are in the gateway's log)"


async def current_session(
    services: ChatServices, lease: Lease, row: InboxRow, rights: Rights
) -> SessionRecord:
    """The chat's latest session, or a new one built for the chat's chosen model.

    A new one too, with one line telling the chat why, when the latest no longer fits the speaker's
    ``rights``: it reads another memory than the speaker may now (someone taken off
    ``gateway.admins`` must not go on reading the owner's memory in their direct chat), or its frozen
    tool list has tools the owner has taken away since (``gateway.rights``).
    """
    store = services.runtime.store
    latest = await store.sessions.latest(row.session_key)
    if latest is None:
        return (await start_session(services, lease, row.message)).record
    taken = rights.taken_away(tool["name"] for tool in latest.tools)
    why = why_replaced(latest.memory_scope, rights.memory_scope, taken)
    if why is None:
        return latest
    log.info("session key %s: %s; starting a new session", row.session_key,
             f"tools taken away: {', '.join(taken)}" if taken else "the memory scope changed")  # fmt: skip
    started = await start_session(services, lease, row.message)
    await tell(services, row, why)
    return started.record


def why_replaced(scope: str, now: str, taken: Sequence[str]) -> str | None:
    """The line that tells a chat why its session was replaced (None: it is kept): the session reads
    memory ``scope`` where the speaker now gets ``now``, and has the tools ``taken`` away since."""
    if scope != now and now == OWNER_SCOPE:
        return "New session: you are one of the bot's admins now, so this chat has the owner's memory."
    if scope != now:
        return "New session: your access changed (you are no longer one of the bot's admins here)."
    if taken:
        return f"New session: tools this chat had are no longer allowed here ({', '.join(taken)})."
    return None


def turn_rights(services: TurnServices, speaker: Speaker | None, memory_scope: str) -> Rights:
    """What a turn or run for ``speaker`` in a session of ``memory_scope`` may use (``gateway.rights``)."""
    runtime = services.runtime
    return rights_for(runtime.config, runtime.registry.fixed, services.authorizer, speaker, memory_scope)


def _spec(services: ChatServices, message: InboundMessage) -> SessionSpec:
    is_admin = services.authorizer.is_admin(message.platform, message.user_id)
    return session_spec(message, is_admin=is_admin, platform_hint=services.prompt_hint(message.platform))


async def start_session(services: ChatServices, lease: Lease, message: InboundMessage) -> StartedSession:
    """A new session for the chat of ``message`` (also what ``/new`` does), with warnings to show
    (a project context file that was not loaded)."""
    spec = _spec(services, message)
    lease.check(spec.session_key)
    choice = await services.chat_settings.model_for(spec.session_key)
    started = await services.runtime.new_session(
        spec,
        provider=choice.provider if choice else None,
        model=choice.model if choice else None,
    )
    for warning in started.warnings:
        log.warning("session %s: %s", started.record.id, warning)
    return started


async def answer(services: ChatServices, row: InboxRow, *, resumed: bool = False) -> None:
    """Answer ``row`` (a lane job): run the agent's turn and queue the answer or one clear error line.

    ``resumed``: the row was left unanswered by an earlier run (``Router.recover``), so what that run
    did for it is looked for first. Raises only for cancellation, ``StorageUnavailable`` (the row is
    still pending: run it again once the database is back), ``FencedOut`` (another process took the
    session over: nothing more may be written or said for it here) and ``NoLongerPending`` (another
    worker answered it first); a bug becomes one line for the person and a traceback in the log, and
    the row is closed as failed (not retried at every start).
    """
    try:
        await _answer(services, row, resumed=resumed)
    except (StorageUnavailable, FencedOut, NoLongerPending):
        raise  # the database is down (the worker waits and runs this again), or the work is not ours
    except Exception:
        log.exception("inbox %d: answering failed unexpectedly", row.id)
        await services.replies.answer(row, f"⚠️ No answer: {UNEXPECTED}.", state=InboxState.FAILED)


async def _answer(services: ChatServices, row: InboxRow, *, resumed: bool) -> None:
    runtime = services.runtime
    message = row.message
    address = reply_address(message)
    adapter = services.adapters[message.platform]
    services.reviews.cancel(row.session_key)  # a live turn never waits for a background review
    speaker = speaker_of(message)
    async with hold_pending(runtime.locks, services.inbox, row) as lease:
        if await _closed_without_access(services, row, speaker, "while the message waited"):
            return
        rights = turn_rights(services, speaker, _spec(services, message).memory_scope)
        session = await current_session(services, lease, row, rights)
        streamed = [row.stream_message_id] if row.stream_message_id else []
        earlier = {INBOX_META: row.id}
        recovered = await runtime.agent.earlier_attempt(lease, session, earlier) if resumed else None
        spoken = services.speech.wanted(message, adapter.capabilities)  # then not streamed
        is_admin = services.authorizer.is_admin(message.platform, message.user_id)
        charge = services.budgets.for_turn(message, row.session_key, is_admin=is_admin)
        if is_admin:  # spend warnings that could not reach them as a direct message
            for warning in await services.budgets.owed_warnings(person_id(message.platform, message.user_id)):
                await services.replies.post(address, warning)
        if recovered is not None:
            with charging(charge):
                voice = await _voice(services, row, session, recovered, streamed=streamed) if spoken else None
            if voice is not None:
                await services.replies.queue(voice, row=row, state=InboxState.ANSWERED)
            else:
                await services.replies.answer(row, recovered, streamed=streamed)
            return
        chat = ChatTurn(services, row, lease, session, rights, speaker, streamed, spoken)
        await run_turn(services, chat, charge)


class ChatTurn:
    """A chat's channel of the turn's envelope (``gateway.conversation.envelope``): the message's
    attachments read (a refused one is answered instead), its answer streamed into the chat with
    "typing…" shown meanwhile, or spoken; a stopped turn marked so; the inbox row closed with the
    outcome."""

    reviewed = True
    capped = True

    def __init__(
        self,
        services: ChatServices,
        row: InboxRow,
        lease: Lease,
        session: SessionRecord,
        rights: Rights,
        speaker: Speaker,
        streamed: list[str],
        spoken: bool,
    ) -> None:
        self.services = services
        self.row = row
        self.lease = lease
        self.session = session
        self.rights = rights
        self.speaker = speaker
        self.streamed = streamed
        self.spoken = spoken  # then not streamed (gateway.speech)
        self.stream: ReplyStream | None = None
        self.notices: tuple[str, ...] = ()
        self.voice: list[Outgoing] | None = None

    @asynccontextmanager
    async def around(self) -> AsyncIterator[TurnRequest]:
        services, row, session = self.services, self.row, self.session
        message = row.message
        adapter = services.adapters[message.platform]
        try:  # inside the turn's charge: a transcription is paid like the turn's model requests
            turn_input = await services.media.read(
                adapter, message, session, services.runtime.config.model_info(session.model)
            )
        except MessageRefused as refusal:
            await services.replies.answer(row, f"⚠️ {refusal}", streamed=self.streamed)
            raise Settled from None
        except OverBudget as unpaid:  # a voice note a limit cannot pay: nothing reached the model
            await self.refused(unpaid.refusal)
            raise Settled from None
        self.notices = turn_input.notices
        await echo_transcripts(services, row, turn_input.transcripts)
        address = reply_address(message)
        lease, rights = self.lease, self.rights
        stream = self.stream = ReplyStream(
            adapter,
            address,
            reply_to=message.message_id,
            pacing=services.pacing,
            interval=0.0 if self.spoken else services.stream_interval,
            inbox=services.inbox,
            inbox_id=row.id,
            streamed=self.streamed,
            trusted=lambda: lease.trusted() and rights.still_allowed(),
            earlier=partial(services.replies.delivered, address),
        )
        async with stream:  # typing shows from here, also while hygiene compresses
            try:
                yield TurnRequest(
                    lease,
                    session,
                    user_text(message, turn_input.text),
                    what=f"{message.platform} chat {message.chat_id}",
                    meta={INBOX_META: row.id},
                    on_compressed=partial(notify, services, row),
                    on_event=stream.on_event,
                    media=turn_input.media,
                    gate=rights,
                    approver=services.approvals.for_turn(address, self.speaker.person),
                )
            except asyncio.CancelledError as cancel:
                await asyncio.shield(_cancelled(services, row, stream, cancel))
                raise

    async def ending(self, result: TurnResult) -> None:
        if self.spoken and result.refused is None and not result.error:  # typing shows meanwhile
            written = _answer_text(result, self.notices)
            stream = self.stream
            shown = stream.messages if stream is not None else []
            self.voice = await _voice(self.services, self.row, self.session, result.text, written, shown)

    async def lost_access(self) -> bool:
        return await _closed_without_access(self.services, self.row, self.speaker, "during the turn")

    async def refused(self, refusal: Refusal) -> None:
        if self.stream is None:  # before the turn
            await refuse(self.services, self.row, refusal, streamed=self.streamed)
        else:  # a limit stopped it before its next request
            await refuse(self.services, self.row, refusal, stream=self.stream)
            self._timed()

    async def failed(self, result: TurnResult) -> None:
        assert self.stream is not None
        row, metrics = self.row, self.services.metrics
        await self.services.replies.queue(
            self.stream.final(f"⚠️ {result.error}"), row=row, state=InboxState.FAILED
        )
        metrics.turns.labels("failed").inc()
        metrics.delivery_failures.labels(row.message.platform).inc()
        self._timed()

    async def answered(self, result: TurnResult) -> None:
        assert self.stream is not None
        voice = self.voice
        operations = voice if voice is not None else self.stream.final(_answer_text(result, self.notices))
        await self.services.replies.queue(operations, row=self.row, state=InboxState.ANSWERED)
        self.services.metrics.turns.labels("answered").inc()
        self._timed()

    def _timed(self) -> None:
        self.services.metrics.turn_seconds.observe(time.time() - self.row.received_at)


async def _closed_without_access(services: ChatServices, row: InboxRow, speaker: Speaker, when: str) -> bool:
    """Close ``row`` with nothing said when ``speaker`` lost access (``herald pairing revoke``) since it
    was admitted; True when so. ``when`` is for the log."""
    if await services.authorizer.is_allowed(speaker):
        return False
    log.info("inbox %d: %s lost access %s; nothing more is sent to them", row.id, speaker.person, when)
    await services.replies.queue([], row=row, state=InboxState.CANCELLED)
    return True


def with_notices(text: str, notices: Sequence[str]) -> str:
    """An answer with its notices (a line each, marked ℹ️) after it, as every answer is delivered."""
    return "\n\n".join([text, *(f"ℹ️ {line}" for line in notices)])


def _answer_text(result: TurnResult, notices: tuple[str, ...]) -> str:
    """The answer as written into the chat: the model's text, then the lines under it."""
    return with_notices(result.text, [*notices, *result.notices])  # e.g. no vision, a fallback, cut off


async def _voice(
    services: ChatServices,
    row: InboxRow,
    session: SessionRecord,
    answer: str,
    written: str | None = None,
    streamed: Sequence[str] = (),
) -> list[Outgoing] | None:
    """The operations of a spoken answer to ``row``, or None: send the text (``gateway.speech``)."""
    message = row.message
    adapter = services.adapters[message.platform]
    return await services.speech.operations(
        adapter.capabilities,
        reply_address(message),
        answer,
        session=session,
        reply_to=message.message_id,
        written=written,
        streamed=streamed,
    )


async def refuse(
    services: ChatServices,
    row: InboxRow,
    refusal: Refusal,
    *,
    stream: ReplyStream | None = None,
    streamed: Sequence[str] = (),
) -> None:
    """Close ``row`` as refused by a spend limit. The chat is told once per limit and window that the
    limit is used up, never once per message; a later message in that window is stored and closed
    without a word (``/budget`` says where the chat stands). A request that only would have crossed the
    limit is told each time (``Budgets.should_tell``). What a stopped turn had shown is replaced by the
    line, never left half written."""
    budgets = services.budgets
    told = await budgets.should_tell(refusal, row.session_key)
    shown = bool(streamed) or (stream is not None and bool(stream.messages))
    services.metrics.turns.labels("refused").inc()
    log.info("inbox %d: refused by the spend limit of %s (%s)%s", row.id, refusal.scope.key,
             refusal.window.id, "" if told else "; the chat was told already")  # fmt: skip
    if not told and not shown:
        await services.replies.queue([], row=row, state=InboxState.REFUSED)
        return
    line = budgets.line(refusal)
    if stream is not None:
        await services.replies.queue(stream.final(line), row=row, state=InboxState.REFUSED)
    else:
        await services.replies.answer(row, line, streamed=streamed, state=InboxState.REFUSED)


async def echo_transcripts(services: ChatServices, row: InboxRow, transcripts: tuple[str, ...]) -> None:
    """With ``stt.reply_with_transcript``, what was heard in a voice note, before the answer; once per
    message: the echo is queued with the row's id, and an attempt that finds something queued for the
    row already (an earlier attempt's echo: the answer itself closes the row) does not echo again."""
    if not transcripts or not services.runtime.config.stt.reply_with_transcript:
        return
    if await services.outbox.items_for(row.id):
        return
    message = row.message
    address = reply_address(message)
    lines = [f"🎤 {transcript}" for transcript in transcripts]
    replies = services.replies
    operations = [
        op for line in lines for op in replies.render(address, line, streamed=(), reply_to=message.message_id)
    ]
    await replies.queue(operations, row=row)


async def notify(services: ChatServices, row: InboxRow, outcome: CompressionOutcome) -> None:
    """One line before the answer: session hygiene compressed the conversation."""
    await tell(services, row, outcome.notice or outcome.line())


async def tell(services: ChatServices, row: InboxRow, line: str) -> None:
    """One line into ``row``'s chat before its answer (a new session, a compression)."""
    address = reply_address(row.message)
    adapter = services.adapters[address.platform]
    if adapter.capabilities.appends:  # a terminal shows it at once, before the answer streams
        await adapter.notice(address, f"[{line}]")
        return
    await services.replies.queue([Outgoing(address, Operation.SEND, OutboundText(f"ℹ️ {line}"))])


async def _cancelled(
    services: ChatServices, row: InboxRow, stream: ReplyStream, cancel: asyncio.CancelledError
) -> None:
    """A stopped turn: ``/stop`` or a newer message closes the row; a shutdown leaves it for the restart."""
    if not (cancel.args and cancel.args[0] == INTERRUPTED):
        return
    operations = stream.final(stream.shown_text() + STOPPED_SUFFIX) if stream.messages else []
    try:
        await services.replies.queue(operations, row=row, state=InboxState.CANCELLED)
    except (NoLongerPending, FencedOut):
        return  # closed meanwhile, or the session is another process's: nothing of ours to close
    except StorageUnavailable as error:  # never in place of the cancellation: the stop must stand
        log.warning("inbox %d was stopped; closing it waits for the database: %s", row.id, error)
        return  # the worker tries to close it once more (gateway.intake.worker); it is not answered now
    services.metrics.turns.labels("cancelled").inc()
