"""A counting semaphore shared by processes through Redis, whose slots expire if their holder dies.

Used for the cluster-wide caps (turns running at once, model requests in flight): each slot is a member
of one sorted set, scored with its expiry in Redis' own clock (so hosts' clocks do not matter). Taking a
slot drops the expired ones first, then adds one if fewer than ``limit`` are left, atomically (a Lua
script). A holder renews its slot every ``ttl / 3`` seconds (:class:`resilience.renewal.Renewer`); a
holder that died stops renewing and its slot is free ``ttl`` seconds later.

Contract:

- ``async with semaphore.slot():`` waits until a slot is free (polling, with the one backoff up to
  :data:`POLL_MAX`), holds it until the block exits (normally, by exception or by cancellation) and
  releases it then. A waiter that is cancelled holds nothing.
- While Redis cannot be reached, :meth:`RedisSemaphore.slot` waits for it, or, if the caller says
  so, runs the block without a slot. :meth:`RedisSemaphore.take` and ``try_take`` raise
  :class:`redis.exceptions.RedisError` then. Failed renewals and releases are
  logged and otherwise ignored (the slot then lapses at its expiry); a slot found lapsed is held again
  (a warning).
- A holder paused for longer than ``ttl`` loses its slot to the cap's count: another process may then
  take it, so the cap can be exceeded by such stalled holders until they finish. It is a cap on load,
  not a lock; mutual exclusion is the session lease's job.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.cluster.redis import reaching
from resilience.backoff import Backoff, Streak
from resilience.renewal import Policy, Renewal, Renewer

log = logging.getLogger(__name__)

POLL_FIRST = 0.01
POLL_MAX = 0.25
UNREACHABLE_RETRY = 1.0

Unreachable = Literal["wait", "skip"]

_TAKE = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
  return 1
end
return 0
"""

_RENEW = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local kept = redis.call('ZSCORE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
if kept then return 1 end
return 0
"""

_COUNT = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], ms, '+inf')
"""


class RedisSemaphore:
    """``limit`` slots under the Redis key ``key``, each living ``ttl`` seconds unless renewed."""

    def __init__(self, redis: Redis, key: str, limit: int, *, ttl: float, owner: str) -> None:
        if limit < 1 or ttl <= 0:
            raise ValueError(f"a shared cap needs limit >= 1 and ttl > 0 (got {limit}, {ttl})")
        self.redis = redis
        self.key = key
        self.limit = limit
        self.ttl = ttl
        self.owner = owner  # names this process in the slots it holds (for someone reading Redis)
        self._take = redis.register_script(_TAKE)
        self._renew_script = redis.register_script(_RENEW)
        self._count = redis.register_script(_COUNT)
        self.policy = Policy(ttl)

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl * 1000))

    async def held(self) -> int:
        """Slots held now over every process (for metrics and tests)."""
        return int(await self._count(keys=[self.key]))

    async def try_take(self) -> str | None:
        """A slot's token if one was free now, else None."""
        token = f"{self.owner}:{secrets.token_hex(6)}"
        taken = await self._take(keys=[self.key], args=[self.limit, self._ttl_ms, token])
        return token if int(taken) else None

    async def take(self) -> str:
        """Wait for a slot; its token."""
        waits = Streak(Backoff(POLL_FIRST, POLL_MAX))
        while True:
            token = await self.try_take()
            if token is not None:
                return token
            await asyncio.sleep(waits.next_delay())

    async def release(self, token: str) -> None:
        try:
            await self.redis.zrem(self.key, token)
        except RedisError as error:
            log.warning("releasing a slot of %s failed (%s); it lapses in %.0fs", self.key, error, self.ttl)

    @asynccontextmanager
    async def slot(self, *, unreachable: Unreachable = "wait") -> AsyncIterator[None]:
        """Hold a slot for the block. When Redis cannot be reached: ``"wait"`` retries every
        :data:`UNREACHABLE_RETRY` seconds until it can; ``"skip"`` runs the block without a slot (a cap
        on load must not stop work that is already under way)."""
        told = False
        while True:
            try:
                token = await self.take()
                break
            except RedisError as error:
                if not told:
                    told = True
                    log.warning("the shared cap %s: Redis is unreachable (%s); %s", self.key, error,
                                "waiting for it" if unreachable == "wait" else "not enforced")  # fmt: skip
                if unreachable == "skip":
                    yield
                    return
                await asyncio.sleep(UNREACHABLE_RETRY)
        renewer = Renewer(_Slot(self, token), self.policy, name=f"a slot of {self.key}")
        renewer.confirm(renewer.attempt())
        renewer.start()
        try:
            yield
        finally:
            await renewer.stop()
            await asyncio.shield(self.release(token))


class _Slot:
    """One slot held, as its renewer sees it: a slot that lapsed (this process was paused?) is held
    again, since the cap is on load, not a lock."""

    def __init__(self, semaphore: RedisSemaphore, token: str) -> None:
        self.semaphore = semaphore
        self.token = token

    async def renew(self) -> Renewal:
        semaphore = self.semaphore
        with reaching(semaphore.redis):
            kept = await semaphore._renew_script(keys=[semaphore.key], args=[semaphore._ttl_ms, self.token])
        return Renewal.HELD if int(kept) else Renewal.RETAKEN
