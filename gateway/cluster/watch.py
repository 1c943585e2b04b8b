"""Noticing at once that Redis went away, because what this process holds there may be forgotten.

A lease in Redis (the leader's, a session's) is safe as long as Redis keeps it until it expires: its
holder trusts it by its own clock for less than the TTL. A Redis that restarts without its data forgets
every lease at once, so another process can win a lease whose holder is alive and still acting — two
``getUpdates`` pollers, two turns of one chat streaming into it — until the holder's next renewal finds
the lease gone (up to a third of the TTL later). The database fences what the old holder writes; what it
shows on a platform meanwhile it cannot fence.

A restart, like every way of losing Redis, cuts the connections to it. :class:`ConnectionWatch` keeps
one connection open (subscribed to the channel where released leases are announced) and, the moment it
breaks, calls every ``on_lost`` callback: the holders stop trusting what they hold until a renewal
confirms it. The break is seen as the old server goes away, before the new one can answer anybody, so
before anybody else can win what it forgot. (A connection that is merely cut, Redis keeping its data,
costs a renewal or a new election: nothing is lost.)

The same connection hears the leases given back: a leader or a shard lease released (a graceful stop,
a step-down) publishes its key on the channel (``gateway.cluster.leases.lease``), and every
``on_released`` callback gets it, so a process waiting for that lease tries to take it at once rather
than at its next periodic try. A notice missed (the connection was away) costs only that wait.

Contract: callbacks run on the event loop, once per lost connection (``on_lost``) or per message
(``on_released``), and must return at once (they set flags and wake tasks; they never await).
:meth:`ConnectionWatch.run` never raises but for cancellation; it reconnects every :data:`RETRY`
seconds while Redis is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.cluster.redis_errors import UNREACHABLE

log = logging.getLogger(__name__)

RETRY = 0.5  # seconds between attempts to connect again
LISTEN = 1.0  # seconds one wait for a message lasts (the wait is repeated; a break ends it at once)

OnLost = Callable[[], None]
OnReleased = Callable[[str], None]  # the key of the lease released


def without_retries(redis: Redis) -> Redis:
    """A client to the same Redis that never retries: a broken connection raises instead of being
    quietly replaced (which would hide a restart that was over before the retry)."""
    pool = redis.connection_pool
    kwargs = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0)}
    single = ConnectionPool(connection_class=pool.connection_class, max_connections=1, **kwargs)
    return Redis(connection_pool=single)


class ConnectionWatch:
    """Watches the connection to the Redis of ``redis`` on a connection of its own, subscribed to
    ``channel`` (where released leases are announced)."""

    def __init__(self, redis: Redis, channel: str) -> None:
        self.redis = without_retries(redis)
        self.channel = channel
        self._callbacks: list[OnLost] = []
        self._released: list[OnReleased] = []
        self.connected = asyncio.Event()  # set while the watching connection is up (tests wait for it)
        self.lost = 0  # how many times the connection broke

    def on_lost(self, callback: OnLost) -> None:
        """Call ``callback`` each time the connection to Redis breaks."""
        self._callbacks.append(callback)

    def on_released(self, callback: OnReleased) -> None:
        """Call ``callback`` with the key of each lease announced released."""
        self._released.append(callback)

    async def run(self) -> None:
        """Watch until cancelled."""
        while True:
            try:
                async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel)
                    self.connected.set()
                    while True:
                        message = await pubsub.get_message(timeout=LISTEN)
                        if message is not None and message.get("type") == "message":
                            self._announce(str(message["data"]))
            except UNREACHABLE as error:
                if self.connected.is_set():
                    self.connected.clear()
                    self.lost += 1
                    log.warning("the connection to Redis broke (%s): re-checking every lease held", error)
                    self._tell()
            await asyncio.sleep(RETRY)

    async def aclose(self) -> None:
        """Close the watching connection (cancel :meth:`run` first)."""
        await self.redis.aclose()

    def _announce(self, key: str) -> None:
        for callback in self._released:
            try:
                callback(key)
            except Exception:
                log.exception("a lease-release callback failed")

    def _tell(self) -> None:
        for callback in self._callbacks:
            try:
                callback()
            except Exception:  # one holder's bug must not keep the others from hearing it
                log.exception("a Redis connection-loss callback failed")
