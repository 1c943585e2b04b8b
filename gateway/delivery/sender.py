"""The outbox sender: sends what the outbox holds until the platform accepted it.

Replies of one chat go out in the order they were queued (only the oldest pending item of a chat is
tried), different chats concurrently. A platform failure is never silent: a retryable one (429,
network, 5xx) is retried with backoff that honours ``retry_after``; a formatting refusal is resent as
plain text; an edit of a message that is gone becomes a new message; a voice note the platform will not
take becomes its words as text (or nothing, when they went out beside it); a chat that is gone, or an
item that keeps failing, is marked failed, logged and counted in ``gateway_delivery_failures_total``.
Every attempt at an item carries its delivery key (``OutboxItem.key``), so a platform that deduplicates
by it shows one message when an attempt it accepted is tried again (a lost answer, a crash before the
item was recorded sent).

A chat that the send pacing pauses for longer than ``MAX_PACING_WAIT`` (a 429, or in a cluster the
shared rate window) is postponed, never waited for; pacing that cannot be consulted (the cluster's
Redis is down) postpones every item by ``PASS_RETRY`` without counting an attempt.

Several processes (``claimant`` given): each sender claims at most ``CLAIM_BATCH`` heads per round
(``Outbox.due_heads``), keeps each claim alive while its attempt runs (every third of the claim time),
checks it right before handing the request to the platform, and changes the item only while it still
holds it, but for recording a send the platform accepted (see ``gateway.ledger.outbox``). A sender that
finds its claim taken over sends nothing more for that item and leaves the row to the process that holds
it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from adapters.base import Adapter, DeliveryError
from adapters.text.entities import plain_fallback
from gateway.delivery.pacing import PacingUnavailable, SendPacing
from gateway.intake.outage import until_reachable
from gateway.ledger.outbox import Claimant, Operation, Outbox, OutboxItem, OutboxState
from gateway.server.metrics import GatewayMetrics
from resilience.backoff import Backoff
from resilience.cancelling import CarriedThrough, wait_event
from resilience.renewal import Policy, Renewal, Renewer

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 12  # about an hour of backoff: then the reply is given up on and counted as failed
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 600.0
CONCURRENT_CHATS = 32
CLAIM_BATCH = CONCURRENT_CHATS  # heads one process claims per round, so the others get the rest
MAX_PACING_WAIT = 2.0  # a chat paused longer than this is rescheduled instead of waited for
IDLE_WAIT = 5.0  # the longest sleep: items queued by another process (herald pairing) go out soon
PASS_RETRY = 5.0  # after a pass failed (the database was locked or full): try again this much later
RECORD_PATIENCE = 300.0  # seconds a send the platform accepted is retried into a database that is away
RECORDING = Backoff(0.1, 0.5)  # well inside PASS_RETRY: the sender that sent it records it first


RETRIES = Backoff(FIRST_BACKOFF, MAX_BACKOFF)  # the platform's retry_after wins when it gives one


@dataclass(frozen=True)
class _Claim:
    """This sender's claim on an outbox item, as its renewer sees it."""

    outbox: Outbox
    item_id: int
    claimant: Claimant
    clock: Callable[[], float]

    async def renew(self) -> Renewal:
        held = await self.outbox.keep_claim(self.item_id, self.claimant, self.clock())
        return Renewal.HELD if held else Renewal.LOST


class OutboxSender:
    """Runs as one task for the gateway's lifetime (``run``); ``notify`` wakes it for new items."""

    def __init__(
        self,
        outbox: Outbox,
        adapters: Mapping[str, Adapter],
        pacing: SendPacing,
        metrics: GatewayMetrics,
        *,
        claimant: Claimant | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.outbox = outbox
        self.adapters = adapters
        self.pacing = pacing
        self.metrics = metrics
        self.claimant = claimant  # None: the only process sending these chats, nothing is claimed
        self.clock = clock
        self._wake = asyncio.Event()
        self._rng = random.Random()
        self._slots = asyncio.Semaphore(CONCURRENT_CHATS)
        self._pass = asyncio.Lock()  # one pass at a time: an item must never be attempted twice at once
        self._delivering = CarriedThrough()  # attempts by item id, run on through a cancelled pass (_attempt)
        self._held: set[int] = set()  # items claimed by this sender whose attempt has not ended

    def _served(self) -> dict[str, str | None]:
        return {platform: adapter.only_chat for platform, adapter in self.adapters.items()}

    def notify(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.send_due()
                next_at = await self.outbox.next_attempt_at(self._served())
            except Exception:  # a database error must not end every chat's replies for good
                log.exception("outbox sender: a pass failed; trying again in %.0f s", PASS_RETRY)
                next_at = self.clock() + PASS_RETRY
            wait = IDLE_WAIT if next_at is None else min(IDLE_WAIT, max(0.0, next_at - self.clock()))
            await wait_event(self._wake, wait if wait > 0 else 0.01)

    async def send_due(self) -> int:
        """Send everything due now, chat by chat in order; returns how many items were handled."""
        async with self._pass:
            return await self._send_due()

    async def _send_due(self) -> int:
        handled = 0
        while True:
            limit = None if self.claimant is None else CLAIM_BATCH
            due = await self.outbox.due_heads(
                self.clock(), self._served(), claimant=self.claimant, limit=limit
            )
            heads = [item for item in due if not self._delivering.carrying(item.id)]
            if not heads:
                break
            results = await asyncio.gather(*(self._attempt(item) for item in heads))
            handled += len(heads)
            if not any(results):
                break  # everything left is waiting for a retry time
        self.metrics.outbox_pending.set(await self.outbox.pending_count(self._served()))
        return handled

    async def flush(self, seconds: float) -> bool:
        """Send what is due until nothing is pending or ``seconds`` pass (shutdown); True when empty.

        In a cluster: send what is due and not claimed elsewhere, within ``seconds``; True when this
        process holds no claim any more (the other processes send the rest)."""
        if self.claimant is not None:
            try:
                async with asyncio.timeout(seconds):
                    await self.send_due()
            except TimeoutError:
                pass
            return not self._held
        deadline = self.clock() + seconds
        while self.clock() < deadline:
            try:
                async with asyncio.timeout(max(0.0, deadline - self.clock())):
                    await self.send_due()
            except TimeoutError:
                break
            if await self.outbox.pending_count(self._served()) == 0:
                return True
            next_at = await self.outbox.next_attempt_at(self._served())
            if next_at is None or next_at > deadline:
                return False
            await asyncio.sleep(max(0.0, min(next_at, deadline) - self.clock()))
        return await self.outbox.pending_count(self._served()) == 0

    async def _attempt(self, item: OutboxItem) -> bool:
        """One try at ``item``; True when it is settled (sent or failed), False when rescheduled."""
        keeper = self._keep_claim(item)
        handed = False  # to the attempt, which lets the claim go when it ends
        try:
            outgoing = item.outgoing
            adapter = self.adapters[outgoing.address.platform]  # due_heads returns only our chats
            try:
                paused = await self.pacing.paused_for(outgoing.address)
                if paused > MAX_PACING_WAIT:  # rate-limited for a while: come back then, don't block
                    await self.outbox.postpone(item.id, self.clock() + paused, claimant=self.claimant)
                    return False
                async with self._slots:
                    await self.pacing.wait(outgoing.address)
                    if not await self._still_held(item):
                        return False
                    # Once the platform has the request, the attempt runs on even if this pass is
                    # cancelled (a shutdown's flush deadline): the request completes anyway
                    # (adapters.base), and a send the platform accepted must be recorded, or the
                    # restart would send it again.
                    handed = True
                    attempt = self._deliver_then_let_go(adapter, item, keeper)
                    return await self._delivering.run(attempt, key=item.id)
            except PacingUnavailable as error:
                log.warning("outbox item %d held back: %s", item.id, error)
                await self.outbox.postpone(item.id, self.clock() + PASS_RETRY, claimant=self.claimant)
                return False
        finally:
            if not handed:
                self._let_go(item.id, keeper)

    async def _deliver_then_let_go(self, adapter: Adapter, item: OutboxItem, keeper: Renewer | None) -> bool:
        try:
            return await self._deliver(adapter, item)
        finally:
            self._let_go(item.id, keeper)

    def _keep_claim(self, item: OutboxItem) -> Renewer | None:
        """Renew the claim on ``item`` while its attempt runs (a dead process's claims expire). A claim
        found settled or taken over is renewed no more: the attempt finds out when it marks the item."""
        claimant = self.claimant
        if claimant is None:
            return None
        self._held.add(item.id)
        self.metrics.outbox_claims.set(len(self._held))
        claim = _Claim(self.outbox, item.id, claimant, self.clock)
        renewer = Renewer(claim, Policy(claimant.seconds), name=f"the claim of outbox item {item.id}")
        renewer.confirm(renewer.attempt())
        return renewer.start()

    def _let_go(self, item_id: int, keeper: Renewer | None) -> None:
        if keeper is not None:
            keeper.cancel()
            self._held.discard(item_id)
            self.metrics.outbox_claims.set(len(self._held))

    async def _still_held(self, item: OutboxItem) -> bool:
        """Right before sending: whether this sender still holds ``item`` (always, without claims)."""
        if self.claimant is None:
            return True
        if await self.outbox.keep_claim(item.id, self.claimant, self.clock()):
            return True
        log.info("outbox item %d: another process took it over; not sending it", item.id)
        return False

    async def _deliver(self, adapter: Adapter, item: OutboxItem) -> bool:
        outgoing = item.outgoing
        try:
            message_id = await self._perform(adapter, item)
        except DeliveryError as error:
            return await self._failed(item, error)
        except Exception as error:  # an adapter bug must not stop every other chat's replies
            log.exception("outbox item %d: unexpected error from the adapter", item.id)
            return await self._failed(item, DeliveryError(f"{type(error).__name__}: {error}", retryable=True))
        if not await self._record_sent(item, message_id):
            log.warning("outbox item %d was sent, but another process had sent it already", item.id)
        self.metrics.messages_out.labels(outgoing.address.platform, outgoing.operation.value).inc()
        return True

    async def _record_sent(self, item: OutboxItem, message_id: str) -> bool:
        """Record a send the platform accepted; False when another process had settled the item first.

        The database may be away just then (a restart, a failover). Giving up at once would forget the
        send, and the item would go out again, from here or from another process: it is retried every
        0.1–0.5 s instead (``until_reachable``), for up to ``RECORD_PATIENCE`` seconds. Once the
        database answers, this lands before anyone sends the item again: this process's own next pass
        comes after ``PASS_RETRY``, and another process that finds the claim expired waits
        ``TAKEOVER_GRACE`` (``gateway.ledger.outbox``)."""

        async def record(again: bool) -> bool:
            if again:  # the interrupted write may have committed before its answer was lost
                stored = await self.outbox.find(item.id)
                if stored is not None and stored.state is OutboxState.SENT:
                    return stored.platform_message_id == message_id
            return await self.outbox.mark_sent(item.id, message_id, claimant=self.claimant)

        try:
            async with asyncio.timeout(RECORD_PATIENCE):
                return await until_reachable(record, f"recording sent outbox item {item.id}", waits=RECORDING)
        except TimeoutError:
            log.error("outbox item %d was sent but never recorded: it may go out again", item.id)
            raise

    async def _perform(self, adapter: Adapter, item: OutboxItem) -> str:
        """One attempt at ``item``, with its key: the same in every attempt (``adapters.base``), so a
        platform that deduplicates shows one message however often the item is tried, also after it
        was replaced by another form of itself (plain text, a voice note's words, a send for an edit)."""
        outgoing, key = item.outgoing, item.key
        if outgoing.operation is Operation.SEND:
            return await adapter.send(outgoing.address, outgoing.text, reply_to=outgoing.reply_to, key=key)
        if outgoing.operation is Operation.SEND_VOICE:
            if outgoing.voice is None:
                raise DeliveryError("the voice note's stored audio is missing")
            voice, reply_to = outgoing.voice, outgoing.reply_to
            return await adapter.send_voice(outgoing.address, voice, reply_to=reply_to, key=key)
        target = outgoing.target_message_id or ""
        if outgoing.operation is Operation.EDIT:
            await adapter.edit(outgoing.address, target, outgoing.text, key=key)
        else:
            await adapter.delete(outgoing.address, target)
        return target

    async def _failed(self, item: OutboxItem, error: DeliveryError) -> bool:
        outgoing = item.outgoing
        platform = outgoing.address.platform
        if error.formatting and outgoing.text.entities:
            log.warning(
                "outbox item %d: %s rejected the formatting; resending as plain text", item.id, platform
            )
            await self.outbox.replace(
                item.id, replace(outgoing, text=plain_fallback(outgoing.text)), claimant=self.claimant
            )
            return False
        if error.permanent and outgoing.operation is Operation.EDIT:
            log.info("outbox item %d: the streamed message is gone; sending the answer as a new one", item.id)
            await self.outbox.replace(
                item.id,
                replace(outgoing, operation=Operation.SEND, target_message_id=None),
                claimant=self.claimant,
            )
            return False
        if outgoing.operation is Operation.SEND_VOICE and not (error.retryable or error.permanent):
            return await self._voice_refused(item, error)
        if error.permanent and outgoing.operation is Operation.DELETE:
            await self.outbox.mark_sent(item.id, outgoing.target_message_id or "", claimant=self.claimant)
            return True
        if error.retry_after is not None:
            self.metrics.rate_limited.labels(platform).inc()
            await self.pacing.penalize(outgoing.address, error.retry_after, bot_wide=error.bot_wide)
        if not error.retryable or error.permanent or item.attempts + 1 >= MAX_ATTEMPTS:
            await self._give_up(item, str(error))
            return True
        delay = RETRIES.delay(item.attempts + 1, retry_after=error.retry_after, rng=self._rng)
        log.warning(
            "outbox item %d to %s chat %s failed (%s); retry %d in %.1fs",
            item.id, platform, outgoing.address.chat_id, error, item.attempts + 1, delay,
        )  # fmt: skip
        await self.outbox.reschedule(item.id, str(error), self.clock() + delay, claimant=self.claimant)
        return False

    async def _voice_refused(self, item: OutboxItem, error: DeliveryError) -> bool:
        """The platform will not take this voice note: send its words instead, or nothing more when they
        went out beside it; True when the item is settled."""
        outgoing = item.outgoing
        if not outgoing.text.text:
            log.warning("outbox item %d: a voice note was refused (%s); its words were sent as text",
                        item.id, error)  # fmt: skip
            await self.outbox.mark_failed(item.id, str(error), claimant=self.claimant)
            return True
        log.warning("outbox item %d: a voice note was refused (%s); sending its words as text",
                    item.id, error)  # fmt: skip
        words = replace(outgoing, operation=Operation.SEND, voice=None)
        await self.outbox.replace(item.id, words, claimant=self.claimant)
        return False

    async def _give_up(self, item: OutboxItem, reason: str) -> None:
        platform = item.outgoing.address.platform
        if not await self.outbox.mark_failed(item.id, reason, claimant=self.claimant):
            log.info("outbox item %d: another process took it over; leaving it to that one", item.id)
            return
        log.error(
            "outbox item %d to %s chat %s given up after %d attempt(s): %s",
            item.id, platform, item.outgoing.address.chat_id, item.attempts + 1, reason,
        )  # fmt: skip
        self.metrics.delivery_failures.labels(platform).inc()
