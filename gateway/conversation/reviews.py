"""When background reviews run: every ``review.every_turns`` user turns, and when a chat goes idle.

A review (``agent.side.review``) reads the chat's cached transcript and may only write memory and
read skills and past sessions, those of its tools the session's memory scope may still use
(``gateway.rights``). It does not hold the chat's lock — it never writes into the
conversation — and a live turn of the same chat cancels it, so a review never delays an answer.
What is due is computed from the database (user turns after the last reviewed message), so the
schedule survives restarts. With ``agent.review_batch`` its requests go through the provider's batch API
(``agent.batching``: half price, the same cache; a review cancelled meanwhile cancels its batch).
A review is charged to the bot, the chat and, for a guest's own
conversation, that person (``budgets``): one whose next
request would not fit their limits stops there, skipped and logged, that request never sent. At most
one review per chat runs at a time: in a cluster, over every
process, with a live turn on any process cancelling it (``ReviewClaims``,
``gateway.cluster.leases.review_claims``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Protocol

from agent.api import SKIPPED, Batching, SessionRecord, batching, charging, review
from agent.settings import ReviewSettings
from gateway.access.auth import Authorizer
from gateway.budgets.limits import review_charge
from gateway.chats import job_of_session_key
from gateway.conversation.context import AgentRuntime
from gateway.rights import rights_for
from gateway.server.metrics import GatewayMetrics
from resilience.cancelling import cancel_and_wait

log = logging.getLogger(__name__)

SWEEP_EVERY = 60.0
IDLE_LOOKBACK = 7 * 24 * 3600.0  # idle sessions older than this are left alone


class ReviewClaims(Protocol):
    """Reviews across the processes of a cluster (``gateway.cluster.leases.review_claims``)."""

    def holding(self, session_key: str) -> AbstractAsyncContextManager[bool]:
        """Run the block as the chat's one review (False: run none); the task is cancelled when a live
        turn of the chat starts in any process."""
        ...

    async def cancel(self, session_key: str) -> None:
        """Stop the chat's review in whichever process runs it; never raises."""
        ...


class Reviews:
    def __init__(
        self,
        runtime: AgentRuntime,
        settings: ReviewSettings,
        metrics: GatewayMetrics,
        authorizer: Authorizer,
        *,
        claims: ReviewClaims | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runtime = runtime
        self.authorizer = authorizer
        self.settings = settings
        self.metrics = metrics
        self.claims = claims
        self.clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}  # session key -> its review
        self._cancels: set[asyncio.Task[None]] = set()  # cancels sent to the other processes

    @property
    def running(self) -> int:
        return len(self._running)

    def cancel(self, session_key: str) -> None:
        """A live turn of this chat starts: its review (if any) stops now; one in another process of a
        cluster within a second (told in the background: the turn does not wait)."""
        task = self._running.get(session_key)
        if task is not None and not task.done():
            log.info("session key %s: a live turn cancelled its background review", session_key)
            task.cancel()
        elif self.claims is not None:
            telling = asyncio.create_task(self.claims.cancel(session_key), name="cancel a review elsewhere")
            self._cancels.add(telling)
            telling.add_done_callback(self._cancels.discard)

    async def after_turn(self, session: SessionRecord) -> None:
        """Start a review when the session has ``every_turns`` unreviewed user turns."""
        if not self._eligible(session):
            return
        if await self.runtime.store.reviews.turns_since_review(session.id) >= self.settings.every_turns:
            self.start(session)

    async def sweep(self) -> int:
        """Start reviews of sessions idle for ``idle_after`` with unreviewed turns; returns how many."""
        if not self.settings.enabled or self.settings.idle_after <= 0:
            return 0
        now = self.clock()
        reviews = self.runtime.store.reviews
        idle = await reviews.idle_unreviewed(now - self.settings.idle_after, now - IDLE_LOOKBACK)
        started = 0
        for session in idle:
            if self._eligible(session):
                self.start(session)
                started += 1
        return started

    def start(self, session: SessionRecord) -> None:
        task = asyncio.create_task(self._review(session), name=f"review {session.id}")
        self._running[session.session_key] = task
        task.add_done_callback(partial(self._forget, session.session_key))

    async def run(self) -> None:
        """The idle sweeper: runs for the gateway's lifetime."""
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            try:
                await self.sweep()
            except Exception:  # a failed sweep must not end the sweeper
                log.exception("background review sweep failed")

    async def aclose(self) -> None:
        await asyncio.gather(*self._cancels, return_exceptions=True)
        await cancel_and_wait(list(self._running.values()))

    def _eligible(self, session: SessionRecord) -> bool:
        return (
            self.settings.enabled
            and session.session_key not in self._running
            and job_of_session_key(session.session_key) is None  # scheduled runs are not worth reviewing
        )

    async def _review(self, session: SessionRecord) -> None:
        if self.claims is None:
            await self._reviewed(session)
            return
        async with self.claims.holding(session.session_key) as held:
            if held:
                await self._reviewed(session)
            else:
                log.info("session %s: no background review here (another process reviews it)", session.id)

    async def _reviewed(self, session: SessionRecord) -> None:
        charge = review_charge(self.runtime.config.budgets, session.session_key, session.memory_scope)
        runtime = self.runtime  # its tools: those of the session's memory scope now (gateway.rights)
        gate = rights_for(runtime.config, runtime.registry.fixed, self.authorizer, None, session.memory_scope)
        agent = runtime.config.agent  # agent.review_batch: half price, answered within agent.batch_deadline
        deadline = runtime.agent.clock() + agent.batch_deadline
        waits = Batching(deadline=deadline) if agent.review_batch else None
        try:
            with charging(charge), batching(waits):  # the bot's, the chat's and a guest's own limits
                result = await review(
                    runtime.agent, session, max_iterations=self.settings.max_iterations, gate=gate
                )
        except asyncio.CancelledError:
            self.metrics.reviews.labels("cancelled").inc()
            raise
        if result.error and result.error.startswith(SKIPPED):
            self.metrics.reviews.labels("skipped").inc()
            log.info("session %s: background review %s", session.id, result.error)
        elif result.error:
            self.metrics.reviews.labels("failed").inc()
            log.warning("session %s: background review ended early: %s", session.id, result.error)
        else:
            self.metrics.reviews.labels("done").inc()
            log.info("session %s: background review done: %s", session.id, result.text.strip()[:200])

    def _forget(self, key: str, task: asyncio.Task[None]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
