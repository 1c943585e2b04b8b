"""The router: what happens to each inbound message, from every adapter, in one code path.

1. While shutting down, refuse (the adapter then does not confirm, and the platform redelivers later).
2. In groups, ignore what is not addressed to the bot (unless the platform's ``require_mention`` is off).
3. Authorize: unknown people in a direct chat get a pairing code; in groups they are ignored silently.
   Nothing of theirs is stored and nothing reaches a provider.
4. Store in the inbox (deduplicating a platform's redelivery); only then does the sink return.
5. Commands go to the command handler; everything else becomes a turn in the chat's lane, where the
   busy policy decides what a message arriving mid-turn does (the handlers: ``gateway.intake.handling``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import Any

from adapters.base import ChatType, InboundMessage, SinkUnavailable
from agent.db import StorageUnavailable
from agent.files import valid_text
from gateway.access.auth import speaker_of
from gateway.access.pairing import RequestOutcome
from gateway.chats import reply_address, session_key
from gateway.intake.handling import Handlers, IntakeServices
from gateway.intake.work import Work, WorkKind
from gateway.ledger.inbox import InboxEntry, InboxRow, NoLongerPending
from resilience.cancelling import CarriedThrough

log = logging.getLogger(__name__)

INTERRUPT_WAIT = 2.0  # seconds a new message waits to interrupt its chat's running turn (cluster: Redis)

MB = 1_000_000
FULL_REPLY_EVERY = 600.0
TRACKED_REFUSALS = 4096


def valid_message(message: InboundMessage) -> InboundMessage:
    """``message`` with every text a person controls made valid (it is stored, and sent to a model)."""
    title = message.chat_title
    return replace(
        message,
        text=valid_text(message.text),
        user_name=valid_text(message.user_name),
        chat_title=valid_text(title) if title is not None else None,
        attachments=tuple(
            replace(a, name=valid_text(a.name) if a.name is not None else None) for a in message.attachments
        ),
    )


def oversized_refusal(message: InboundMessage, max_mb: float) -> str | None:
    """What to answer a message with files over ``max_mb`` megabytes (None: it may go on)."""
    too_big = [a for a in message.attachments if a.size is not None and a.size > max_mb * MB]
    if not too_big:
        return None
    described = ", ".join(f"{a.name or a.kind} ({_size(a.size)})" for a in too_big if a.size is not None)
    return (
        f"That file is too large: {described}; I take files up to {max_mb:g} MB. Nothing of this message "
        "was sent to the model: send a smaller file, or paste the part that matters."
    )


def _size(size: int) -> str:
    return f"{size / MB:.1f} MB" if size >= MB else f"{size / 1000:.0f} kB"


def lane_work_kind(
    row: InboxRow, max_attachment_mb: float, command_in_lane: Callable[[str], bool | None]
) -> WorkKind | None:
    """What a stored message is in its chat's lane: a turn, a command that touches the session, or None
    for what is answered at once outside the lane (a refusal, an immediate command such as ``/stop``).
    ``command_in_lane``: :meth:`Handlers.command_in_lane`."""
    if oversized_refusal(row.message, max_attachment_mb) is not None:
        return None
    in_lane = command_in_lane(row.message.text)
    if in_lane is None:
        return WorkKind.MESSAGE
    return WorkKind.COMMAND if in_lane else None


class GatewayStopping(Exception):
    """The gateway is shutting down; the adapter must not confirm the message."""


class Router:
    def __init__(
        self, services: IntakeServices, handlers: Handlers, *, require_mention: Mapping[str, bool]
    ) -> None:
        """``require_mention``: per platform, whether shared chats need the bot addressed (an adapter
        marks messages in its free-response chats as addressed)."""
        self.services = services
        self.handlers = handlers
        self.require_mention = require_mention
        self.accepting = True
        self._recovered = asyncio.Event()  # new messages wait until what the last run left is queued
        self._refused_at: dict[tuple[str, str], float] = {}  # who was told "try later", bounded
        self._background: set[asyncio.Task[None]] = set()  # commands and refusals answered outside a lane
        self._storing = CarriedThrough()  # batches being stored and dispatched (handle)

    async def handle(self, messages: Sequence[InboundMessage]) -> None:
        """The adapters' sink (see adapters/base.py for the contract): the messages worth acting on are
        stored in one transaction, then each new one is dispatched in the batch's order.

        Storing and dispatching go to their end together even when the caller is cancelled (an adapter
        stopped mid-batch at shutdown): a message stored but never dispatched would wait for a
        periodic rebuild of the work queue. :meth:`close` waits for them."""
        if not self.accepting:
            raise GatewayStopping("the gateway is shutting down; the messages will be delivered again")
        await self._recovered.wait()
        if not self.accepting:  # closed while waiting for the recovery
            raise GatewayStopping("the gateway is shutting down; the messages will be delivered again")
        await self._storing.run(self._store_and_dispatch(messages))

    async def _store_and_dispatch(self, messages: Sequence[InboundMessage]) -> None:
        try:
            entries = [entry for message in messages if (entry := await self._admit(message)) is not None]
            rows = await self.services.inbox.record_batch(entries) if entries else []
        except StorageUnavailable as error:
            raise SinkUnavailable(str(error)) from error
        metrics = self.services.metrics
        for entry, row in zip(entries, rows, strict=True):
            message = entry.message
            if row is None:
                metrics.messages_ignored.labels(message.platform, "duplicate").inc()
                log.info("%s chat %s: message %s already received", message.platform, message.chat_id,
                         message.message_id)  # fmt: skip
                continue
            metrics.messages_in.labels(message.platform).inc()
            await self.dispatch(row)

    async def _admit(self, message: InboundMessage) -> InboxEntry | None:
        """The message to store, or None: not for the bot, or from someone not allowed (a stranger in a
        direct chat gets a pairing code)."""
        services = self.services
        metrics = services.metrics
        message = valid_message(message)
        if message.chat_type is ChatType.CHANNEL:
            metrics.messages_ignored.labels(message.platform, "channel").inc()
            return None
        direct = message.chat_type is ChatType.DIRECT
        if not direct and not message.addressed and self.require_mention.get(message.platform, True):
            metrics.messages_ignored.labels(message.platform, "not_addressed").inc()
            return None
        if not await services.authorizer.is_allowed(speaker_of(message)):
            metrics.messages_ignored.labels(message.platform, "unauthorized").inc()
            if direct:
                await self._pairing(message)
            return None
        return InboxEntry(message, session_key(message))

    async def dispatch(self, row: InboxRow, *, resumed: bool = False) -> None:
        """Start handling a stored message: a refusal, a command, or a turn in the chat's lane."""
        services = self.services
        kind = lane_work_kind(row, services.settings.max_attachment_mb, self.handlers.command_in_lane)
        if kind is None:
            refusal = oversized_refusal(row.message, services.settings.max_attachment_mb)
            self._in_background(self._reply(row, refusal) if refusal else self.handlers.answer_command(row))
            return
        if kind is WorkKind.COMMAND:
            services.lanes.submit(Work(WorkKind.COMMAND, row.session_key, row.id))
            return
        if services.settings.busy_policy == "interrupt" and await self._interrupt(row.session_key):
            log.info("session key %s: a new message interrupted the running turn", row.session_key)
        services.lanes.submit(Work(WorkKind.MESSAGE, row.session_key, row.id, resumed=resumed))

    async def recover(self) -> int:
        """Answer what a previous run stored but never answered; returns how many."""
        adapters = self.services.adapters  # another process answers the other platforms' messages
        pending = [
            row
            for row in await self.services.inbox.pending()
            if (adapter := adapters.get(row.message.platform)) is not None
            and adapter.serves(row.message.chat_id)
        ]
        for row in pending:
            await self.dispatch(row, resumed=True)
        if pending:
            log.info("resuming %d message(s) left unanswered by the previous run", len(pending))
        self._recovered.set()
        return len(pending)

    async def _interrupt(self, key: str) -> bool:
        """Cancel ``key``'s running turn for a new message (``busy_policy: interrupt``); one that cannot be
        reached within :data:`INTERRUPT_WAIT` seconds is left to finish (the new message is answered
        after it): the messages behind this one, and the platform's acknowledgement, do not wait longer."""
        try:
            async with asyncio.timeout(INTERRUPT_WAIT):
                return await self.services.lanes.cancel_running(key)
        except (StorageUnavailable, TimeoutError) as error:
            reason = str(error) or f"no answer within {INTERRUPT_WAIT:g}s"
            log.warning("session key %s: the running turn could not be interrupted (%s)", key, reason)
            return False

    def _in_background(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(_unless_answered(job))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _reply(self, row: InboxRow, reply: str) -> None:
        """Answer ``row`` with ``reply`` (no turn), closing it in the same transaction. Every part answers
        the message (a Discord slash command keeps them together)."""
        await self.services.replies.answer(row, reply, every_part_replies=True)

    async def _pairing(self, message: InboundMessage) -> None:
        """An unknown person in a direct chat: a pairing code, a "try later", or silence."""
        services = self.services
        request = await services.pairing.request(
            message.platform, message.user_id, message.user_name, message.chat_id
        )
        if request.outcome is RequestOutcome.NEW_CODE and request.code is not None:
            code = request.code.code
            text = (
                "Hi! I only talk to people the owner approved. To ask for access, give the owner this "
                f"code (valid for an hour): {code}\nThey approve it with `herald pairing approve "
                f"{message.platform} {code}` or by sending /approve {code} to me."
            )
            log.info("%s user %s asked for access: pairing code issued", message.platform, message.user_id)
        elif request.outcome is RequestOutcome.FULL and self._may_refuse(message):
            text = "I can't take new access requests right now. Please try again in an hour."
        else:
            return
        await services.replies.post(reply_address(message), text)

    def _may_refuse(self, message: InboundMessage) -> bool:
        """At most one "try later" per person per ``FULL_REPLY_EVERY``, with bounded memory."""
        now = time.monotonic()
        key = (message.platform, message.user_id)
        if now - self._refused_at.get(key, -FULL_REPLY_EVERY) < FULL_REPLY_EVERY:
            return False
        if len(self._refused_at) >= TRACKED_REFUSALS:
            self._refused_at = {k: t for k, t in self._refused_at.items() if now - t < FULL_REPLY_EVERY}
        self._refused_at[key] = now
        return True

    async def close(self) -> None:
        """Stop accepting, and let the batches being stored and the immediate commands already started
        finish."""
        self.accepting = False
        await self._storing.wait(5.0)  # a batch stored is dispatched before the lanes drain
        if self._background:
            await asyncio.wait(self._background, timeout=5.0)


async def _unless_answered(job: Coroutine[Any, Any, None]) -> None:
    """Run a reply outside the lanes; one that another process queued first is dropped (it was
    recovered by both at start-up, say)."""
    try:
        await job
    except NoLongerPending as already:
        log.info("inbox %d: answered elsewhere meanwhile; nothing to do", already.inbox_id)
