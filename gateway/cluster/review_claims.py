"""Background reviews across the cluster: at most one per chat over every process, and a live turn of the
chat on any process stops it.

A review (``gateway.reviews``) does not hold the chat's session lease (it never writes into the
conversation), so within one process ``Reviews`` keeps one per chat and a live turn cancels it; across
processes each review runs only while its process holds the chat's review claim, the key
``herald:review:<key>``, a :class:`gateway.cluster.lease.RedisLease` (its value names this instance and
a random part; ``ttl`` is ``cluster.lease_ttl``, so a dead process's claim lapses):

- a review whose claim is taken elsewhere does not start (one review per chat in the cluster);
- a live turn of the chat, on any process, deletes the key (:meth:`ReviewClaims.cancel`);
- the reviewing process renews its claim every :data:`CHECK_EVERY` seconds
  (:class:`resilience.renewal.Renewer`) and cancels the review once the claim is gone: a live turn
  anywhere stops the chat's review within about a second, as one in the same process does at once. A
  claim that lapsed while Redis could not be reached stops the review the same way when Redis answers
  again;
- while Redis cannot be reached no review starts (reviews are optional work) and a cancel is only
  local (logged).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis

from gateway.cluster.lease import RedisLease, holder_value
from gateway.cluster.redis import RedisUnavailable, reaching, redis_key
from resilience.renewal import Policy, Renewer

log = logging.getLogger(__name__)

CHECK_EVERY = 1.0  # seconds between looks at a running review's claim


def review_key(session_key: str) -> str:
    return redis_key("review", session_key)


class ReviewClaims:
    """``gateway.reviews.ReviewClaims`` on the cluster's Redis."""

    def __init__(self, redis: Redis, *, instance: str, ttl: float) -> None:
        self.redis = redis
        self.instance = instance
        self.ttl = ttl
        self.policy = Policy(ttl, every=min(CHECK_EVERY, ttl / 3))

    @asynccontextmanager
    async def holding(self, session_key: str) -> AsyncIterator[bool]:
        """Hold the chat's review claim for the block (False: another process reviews the chat, or Redis
        cannot be reached: run no review); the task running the block is cancelled once the claim is
        gone."""
        lease = RedisLease(self.redis, review_key(session_key), holder_value(self.instance), self.ttl)
        reviewing = asyncio.current_task()
        assert reviewing is not None, "a review runs in a task"

        def stop_the_review(_: object) -> None:
            log.info("%s: a live turn of the chat (or a lapsed claim) stops its background review", lease.key)
            reviewing.cancel()

        name = f"the review claim of {session_key}"
        renewer = Renewer(lease, self.policy, name=name, on_lost=stop_the_review)
        attempt = renewer.attempt()
        try:
            taken = await lease.take() is None
        except RedisUnavailable as error:
            log.warning("session key %s: no background review now (%s)", session_key, error)
            taken = False
        if not taken:
            yield False
            return
        renewer.confirm(attempt)
        renewer.start()
        try:
            yield True
        finally:
            await renewer.stop()
            try:
                async with asyncio.timeout(CHECK_EVERY):
                    await lease.release()
            except (RedisUnavailable, TimeoutError) as error:
                log.info("the review claim of session key %s lapses by itself (%s)", session_key, error)

    async def cancel(self, session_key: str) -> None:
        """A live turn of the chat starts: the chat's review, in whichever process, stops."""
        try:
            with reaching(self.redis):
                await self.redis.delete(review_key(session_key))
        except RedisUnavailable as error:
            log.warning("session key %s: a review in another process is not stopped (%s)",
                        session_key, error)  # fmt: skip
