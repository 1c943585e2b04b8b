"""Getting an answer onto a platform: render, split, stream by edit, then queue the final text.

While a turn runs, :class:`ReplyStream` shows a typing indicator and, where the platform can edit,
one message edited as text arrives (at most one edit per ``gateway.stream_edit_interval`` per chat;
a new message when the text outgrows the limit). Its first message waits for what the chat's outbox
holds (``earlier``: a notice queued before the turn goes out first); one that waits longer than
:data:`EARLIER_WAIT` is not streamed at all (the answer then queues behind it, in order).
Streaming is best effort: a failed edit never fails the turn, it only stops the live view. The
answer itself always goes through the outbox: the final text, rendered and split for the platform,
becomes edits of the streamed messages (and sends for the rest), queued in the same transaction that
marks the inbox row answered.

Rendering is chosen by the adapter's :class:`Capabilities`, never by a platform's name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType

from adapters.base import Adapter, Capabilities, ChatAddress, DeliveryError, OutboundText
from agent.api import Compressed, FailingOver, Retrying, TextDelta, ToolFinished, ToolStarted, TurnEvent
from agent.db import FencedOut, StorageUnavailable
from gateway.delivery.pacing import PacingUnavailable, SendPacing
from gateway.delivery.text.sanitize import sanitize_text
from gateway.intake.lanes import INTERRUPTED
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Operation, Outgoing
from resilience.cancelling import wait_event

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows "typing…" for about 5 seconds per call
EARLIER_WAIT = 3.0  # seconds a stream waits for the chat's earlier replies before giving up streaming
EMPTY_ANSWER = "(no answer)"


def render(text: str, capabilities: Capabilities) -> list[OutboundText]:
    """``text`` (the model's Markdown) as messages that each fit the platform; never empty. The
    platform's renderer (``capabilities.render``) gets it sanitized (``gateway.delivery.text.sanitize``)."""
    source = sanitize_text(text)
    parts = list(capabilities.render(source, capabilities.max_message_length)) if source.strip() else []
    return parts or [OutboundText(EMPTY_ANSWER)]


def answer_operations(
    capabilities: Capabilities,
    address: ChatAddress,
    text: str,
    *,
    streamed: list[str],
    reply_to: str | None,
    shown: Sequence[OutboundText] = (),
) -> list[Outgoing]:
    """What delivers ``text`` as the answer: edit the streamed messages in order, send the rest,
    delete streamed messages the final text no longer needs.

    ``shown``: what each streamed message is known to show now; one that already shows its final part
    is left alone (an edit to the same text costs a paced API call and changes nothing)."""
    parts = render(text, capabilities)
    operations: list[Outgoing] = []
    for index, part in enumerate(parts):
        if index < len(streamed):
            if index < len(shown) and shown[index] == part:
                continue
            operations.append(Outgoing(address, Operation.EDIT, part, target_message_id=streamed[index]))
        else:
            first = index == 0
            operations.append(Outgoing(address, Operation.SEND, part, reply_to=reply_to if first else None))
    for message_id in streamed[len(parts) :]:
        operations.append(Outgoing(address, Operation.DELETE, OutboundText(""), target_message_id=message_id))
    return operations


class ReplyStream:
    """The live view of one turn's answer. Use ``async with``; feed ``on_event`` to the agent."""

    def __init__(
        self,
        adapter: Adapter,
        address: ChatAddress,
        *,
        reply_to: str | None,
        pacing: SendPacing,
        interval: float,
        inbox: Inbox,
        inbox_id: int,
        streamed: list[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        trusted: Callable[[], bool] = lambda: True,
        earlier: Callable[[float], Awaitable[bool]] | None = None,
    ) -> None:
        """``trusted``: asked right before each streamed send or edit; once it says no (the session's
        lease may have lapsed: ``agent.locks.Lease.trusted``; the person lost access), streaming stops
        for good. ``earlier``: waits (at most the seconds given) until the chat's earlier replies are
        sent, True when they are; asked before the first streamed message (``Replies.delivered``)."""
        self.adapter = adapter
        self.address = address
        self.reply_to = reply_to
        self.pacing = pacing
        self.interval = interval
        self.inbox = inbox
        self.inbox_id = inbox_id
        self.clock = clock
        self.trusted = trusted
        self.earlier = earlier
        self.messages: list[str] = list(streamed or [])  # platform ids of the streamed messages
        self._unrecorded: list[str] = []  # streamed messages whose id the inbox could not store
        self._shown: list[OutboundText] = []  # what each streamed message shows now
        self._text = ""
        self._last_edit = 0.0
        self._live = interval > 0 and adapter.capabilities.can_edit
        self._typing: asyncio.Task[None] | None = None
        self._typing_done = asyncio.Event()

    async def __aenter__(self) -> ReplyStream:
        self._typing = asyncio.create_task(self._keep_typing())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop_typing()
        stopped_by_user = isinstance(error, asyncio.CancelledError) and error.args[:1] == (INTERRUPTED,)
        if error is not None and not stopped_by_user:
            await self._take_back_unrecorded()

    async def _take_back_unrecorded(self) -> None:
        """The turn ends without an answer and runs again (here, or in the process that took the session
        over): a streamed message whose id could not be stored would be left half-written beside the
        rerun's, so it goes."""
        for message_id in self._unrecorded:
            try:
                await self.adapter.delete(self.address, message_id)
            except DeliveryError as failure:
                log.warning("could not delete a half-streamed message in %s chat %s: %s",
                            self.address.platform, self.address.chat_id, failure)  # fmt: skip
        self._unrecorded.clear()

    async def stop_typing(self) -> None:
        """Stop the typing indicator, letting a call in flight finish rather than cancelling it.

        Cancelling an HTTP request mid-flight can lose its pooled connection for good (httpcore,
        encode/httpcore#1093); under load enough were lost that the Telegram bot could send nothing
        at all (``benchmarks/gateway.py`` found it). The call is bounded by the adapter's timeouts.
        """
        if self._typing is None:
            return
        self._typing_done.set()
        await asyncio.wait({self._typing})
        self._typing = None

    async def _keep_typing(self) -> None:
        while not self._typing_done.is_set():
            await self.adapter.typing(self.address)
            await wait_event(self._typing_done, TYPING_EVERY)

    async def on_event(self, event: TurnEvent) -> None:
        """The agent's event consumer: never raises (a platform hiccup must not fail the turn)."""
        if self.adapter.capabilities.appends:
            await self._append(event)
            return
        if isinstance(event, Retrying | FailingOver) and event.discard_partial:
            self._text = ""
            return
        if not isinstance(event, TextDelta) or not self._live:
            return
        self._text += event.text
        if self.clock() - self._last_edit >= self.interval:
            await self._show()

    async def _append(self, event: TurnEvent) -> None:
        """A platform that appends (a terminal): the answer as it comes, tools and retries as they go."""
        adapter, address = self.adapter, self.address
        if isinstance(event, TextDelta):
            self._text += event.text
            await adapter.append(address, event.text)
        elif isinstance(event, ToolStarted):
            await adapter.append(address, f"\n  ⚙ {event.name} …")
        elif isinstance(event, ToolFinished):
            await adapter.append(address, " failed\n" if event.is_error else " done\n")
        elif isinstance(event, Retrying):
            again = " (discarding the partial answer)" if event.discard_partial and self._text else ""
            await adapter.notice(
                address,
                f"[provider error: {event.reason}; retry {event.attempt} in {event.delay:.1f}s{again}]",
            )
            if event.discard_partial and self._text:
                self._text = ""
                await adapter.append(address, "\n")  # the answer starts over on a line of its own
        elif isinstance(event, FailingOver) and event.discard_partial and self._text:
            # the answer's own line says which model gave it; here only why the text starts over
            await adapter.notice(address, f"[the model failed mid-answer; {event.model} answers instead]")
            self._text = ""
            await adapter.append(address, "\n")
        elif isinstance(event, Compressed):
            await adapter.append(address, f"\n[{event.outcome.notice or event.outcome.line()}]\n")

    async def _after_earlier(self) -> bool:
        """Before the first streamed message: whether what the chat's outbox holds went out first."""
        if self.messages or self.earlier is None:
            return True
        try:
            if await self.earlier(EARLIER_WAIT):
                self.earlier = None
                return True
        except StorageUnavailable as error:
            log.warning("streaming to %s chat %s skipped: %s", self.address.platform, self.address.chat_id,
                        error)  # fmt: skip
        else:
            log.info("streaming to %s chat %s skipped: earlier replies are still waiting to be sent",
                     self.address.platform, self.address.chat_id)  # fmt: skip
        self._live = False  # the answer goes through the outbox, behind them
        return False

    async def _show(self) -> None:
        if not await self._after_earlier():
            return
        self._last_edit = self.clock()
        parts = render(self._text, self.adapter.capabilities)
        try:
            for index, part in enumerate(parts):
                if index < len(self._shown) and self._shown[index] == part:
                    continue
                await self.pacing.wait(self.address)
                if not self.trusted():
                    log.warning("streaming to %s chat %s stopped: the session's lease may have lapsed, "
                                "or the person lost access",
                                self.address.platform, self.address.chat_id)  # fmt: skip
                    self._live = False
                    return
                if index < len(self.messages):
                    await self.adapter.edit(self.address, self.messages[index], part)
                else:
                    reply_to = self.reply_to if not self.messages else None
                    message_id = await self.adapter.send(self.address, part, reply_to=reply_to)
                    self.messages.append(message_id)
                    if index == 0:
                        await self._record(message_id)
                if index < len(self._shown):
                    self._shown[index] = part
                else:
                    self._shown.append(part)
        except (DeliveryError, PacingUnavailable) as error:
            if isinstance(error, DeliveryError) and error.retry_after is not None:
                await self.pacing.penalize(self.address, error.retry_after, bot_wide=error.bot_wide)
            log.warning(
                "streaming to %s chat %s stopped: %s", self.address.platform, self.address.chat_id, error
            )
            self._live = False  # the final answer still goes through the outbox

    async def _record(self, message_id: str) -> None:
        """Store which message the answer streams into, so a rerun after a restart reuses it. One that
        cannot be stored (the database is away, or another process took the session over while this
        send was in flight) is taken back when the turn ends without an answer: nobody else knows it."""
        try:
            await self.inbox.set_stream_message(self.inbox_id, message_id)
        except (StorageUnavailable, FencedOut) as error:
            log.warning(
                "streaming in %s chat %s stopped: %s", self.address.platform, self.address.chat_id, error
            )
            self._unrecorded.append(message_id)
            self._live = False

    def shown_text(self) -> str:
        """The answer as far as it was streamed."""
        return self._text

    def final(self, text: str) -> list[Outgoing]:
        """The outbox operations that deliver ``text`` as the answer, reusing the streamed messages.

        On a platform that appends, what was already shown is not sent again, only what follows it.
        """
        if self.adapter.capabilities.appends and self._text and text.startswith(self._text):
            rest = text[len(self._text) :]
            if not rest.strip():
                return []
            return [Outgoing(self.address, Operation.SEND, OutboundText(rest.strip("\n")))]
        return answer_operations(
            self.adapter.capabilities,
            self.address,
            text,
            streamed=self.messages,
            reply_to=self.reply_to,
            shown=self._shown,
        )
