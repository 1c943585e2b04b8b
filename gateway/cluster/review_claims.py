"""Background reviews across the cluster: at most one per chat over every process, and a live turn of the
chat on any process stops it.

A review (``gateway.reviews``) does not hold the chat's session lease (it never writes into the
conversation), so within one process ``Reviews`` keeps one per chat and a live turn cancels it; across
processes each review runs only while its process holds the chat's review claim, the key
``herald:review:<key>`` (``SET NX PX ttl``; its value names this instance and a random part; ``ttl`` is
``cluster.lease_ttl``, so a dead process's claim lapses):

- a review whose claim is taken elsewhere does not start (one review per chat in the cluster);
- a live turn of the chat, on any process, deletes the key (:meth:`ReviewClaims.cancel`);
- the reviewing process looks at its claim every :data:`CHECK_EVERY` seconds (compare-and-pexpire,
  which also renews it) and cancels the review once the claim is gone: a live turn anywhere stops the
  chat's review within about a second, as one in the same process does at once. A claim that lapsed
  while Redis could not be reached stops the review the same way when Redis answers again;
- while Redis cannot be reached no review starts (reviews are optional work) and a cancel is only
  local (logged).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis

from gateway.cluster.leader import REDIS_ERRORS, RELEASE, RENEW, milliseconds
from gateway.cluster.redis import redis_key
from gateway.cluster.supervision import supervised

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
        self._renew = redis.register_script(RENEW)
        self._release = redis.register_script(RELEASE)

    @asynccontextmanager
    async def holding(self, session_key: str) -> AsyncIterator[bool]:
        """Hold the chat's review claim for the block (False: another process reviews the chat, or Redis
        cannot be reached: run no review); the task running the block is cancelled once the claim is
        gone."""
        key, value = review_key(session_key), f"{self.instance}:{secrets.token_hex(4)}"
        try:
            taken = await self.redis.set(key, value, nx=True, px=milliseconds(self.ttl))
        except REDIS_ERRORS as error:
            log.warning("session key %s: no background review now (Redis: %s)", session_key, error)
            taken = False
        if not taken:
            yield False
            return
        reviewing = asyncio.current_task()
        assert reviewing is not None, "a review runs in a task"
        watch = supervised(f"the review claim of {session_key}", lambda: self._watch(key, value, reviewing))
        watching = asyncio.create_task(watch, name=f"review claim {session_key}")
        try:
            yield True
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            try:
                async with asyncio.timeout(CHECK_EVERY):
                    await self._release(keys=[key], args=[value])
            except REDIS_ERRORS as error:
                log.info("the review claim of session key %s lapses by itself (%s)", session_key, error)

    async def _watch(self, key: str, value: str, reviewing: asyncio.Task[object]) -> None:
        while True:
            await asyncio.sleep(CHECK_EVERY)
            try:
                kept = await self._renew(keys=[key], args=[value, milliseconds(self.ttl)])
            except REDIS_ERRORS:
                continue  # tried again; the claim lapses if Redis stays away, and that ends the review
            if not kept:
                log.info("%s: a live turn of the chat (or a lapsed claim) stops its background review", key)
                reviewing.cancel()
                return

    async def cancel(self, session_key: str) -> None:
        """A live turn of the chat starts: the chat's review, in whichever process, stops."""
        try:
            await self.redis.delete(review_key(session_key))
        except REDIS_ERRORS as error:
            log.warning("session key %s: a review in another process is not stopped (Redis: %s)",
                        session_key, error)  # fmt: skip
