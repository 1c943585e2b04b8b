"""The connections of a process to its cluster's Redis: a fixed number, waited for in turn, counted.

A process opens at most ``cluster.redis_connections`` connections to the cluster's Redis (each bot of it:
every bot has a Redis database and a pool of its own), so that the processes of a cluster together stay
within Redis' ``maxclients`` and a process looks the same after a month as after a minute (a pool
without a bound keeps every connection its busiest moment opened). One of them is the connection
watch's (``gateway.cluster.watch``: a pool of its own, one connection that never retries); the others
are :class:`BoundedPool`'s, shared by every user of ``Cluster.redis``.

Who takes a connection of the pool, and for how long (what ``cluster.redis_connections`` is sized by):

- for as long as the process runs, one each: the approvals channel and the work queue's control
  channel (pub/sub), and the work queue's reader (``XREADGROUP BLOCK``, given back and taken again at
  least every second); with the watch, :data:`gateway.config.REDIS_LISTENERS`;
- for one command (a round trip, a pipeline, a Lua script), everything else: lease renewals (sessions,
  leader, shards, the process's name, review claims, slots of the shared caps), the work queue's appends,
  acknowledgements and keeper, the running records and cancels, send pacing, spend counts, the
  console's login counts.

A command that finds every connection in use waits for one, for as long as it takes (redis-py's
``BlockingConnectionPool`` without a timeout): a queue, not an outage, so never ``RedisUnavailable`` or
a "Redis unreachable" line. The wait ends: the setting is refused unless it leaves room beside the
listeners (``gateway.config``), and every other holder gives its connection back within one command's
bounds (``gateway.cluster.redis``: connect and socket timeouts, a few retries). redis-py's own timeout,
``ConnectionError("No connection available.")``, would be read as Redis being away
(``gateway.cluster.redis_errors``), which is why there is none. A caller that bounds a command in time
(a leader's renewal within its interval) counts the wait in that bound, as it counts a slow answer: a
burst's wait is milliseconds. Only a pool held in full for as long as ``/readyz``'s PING waits (a leak)
makes the process not ready, and the problem says so (``gateway.cluster.redis.PoolExhausted``).

Waits are counted (:class:`Waits`: ``gateway_redis_pool_waits_total`` and
``gateway_redis_pool_wait_seconds_total``); a wait of :data:`SLOW_WAIT` seconds or more is a warning
naming the setting, at most one every :data:`REPORT_EVERY` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool
from redis.asyncio.connection import AbstractConnection

from gateway.config import ConfigError

log = logging.getLogger(__name__)

WATCHES = 1  # the connection watch's own connection, outside the pool
SLOW_WAIT = 1.0  # seconds: a wait for a free connection this long is worth a warning
REPORT_EVERY = 60.0  # seconds between two such warnings (the waits between are counted in the next)


@dataclass
class Waits:
    """The waits for a free connection: all counted, the slow ones reported now and then."""

    count: int = 0
    seconds: float = 0.0
    slow: int = 0  # slow waits since the last report
    longest: float = 0.0  # the longest of them
    reported_at: float | None = None

    def record(self, seconds: float, now: float) -> bool:
        """Count a wait of ``seconds`` that ended at ``now``; True when it is time to report the slow ones."""
        self.count += 1
        self.seconds += seconds
        if seconds < SLOW_WAIT:
            return False
        self.slow += 1
        self.longest = max(self.longest, seconds)
        return self.reported_at is None or now - self.reported_at >= REPORT_EVERY

    def report(self, pooled: int, now: float) -> str:
        """The warning for the slow waits since the last one (which it resets)."""
        line = (
            f"{self.slow} Redis command(s) waited {SLOW_WAIT:.0f}s or more (the longest {self.longest:.1f}s) "
            f"for a free connection: all {pooled} pooled connections were in use (cluster.redis_connections "
            f"= {pooled + WATCHES}, the connection watch's included); a burst waits its turn, but if this "
            "recurs, raise the setting (Redis' maxclients must hold the processes times it)"
        )
        self.slow, self.longest, self.reported_at = 0, 0.0, now
        return line


class BoundedPool(BlockingConnectionPool):
    """redis-py's blocking pool, waiting without a timeout (see the module), that counts its waits."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.waits = Waits()

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        if free(self):
            return await self._take(*args, **kwargs)
        started = time.monotonic()
        try:
            return await self._take(*args, **kwargs)
        finally:
            now = time.monotonic()
            if self.waits.record(now - started, now):
                log.warning("%s", self.waits.report(self.max_connections, now))

    async def _take(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        taking = super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        connection: AbstractConnection = await taking
        return connection


def bounded_pool(url: str, connections: int, **kwargs: Any) -> BoundedPool:
    """The pool of ``connections`` (``cluster.redis_connections``, the watch's one included) to ``url``;
    ValueError for a URL redis-py does not take, ConfigError for one that sizes the pool itself."""
    pooled = connections - WATCHES
    pool = BoundedPool.from_url(url, max_connections=pooled, timeout=None, **kwargs)
    if pool.max_connections != pooled or pool.timeout is not None:
        raise ConfigError(
            "cluster.redis_url sets max_connections or timeout: the number of connections is "
            "cluster.redis_connections (and a command waits its turn for one); leave them out of the URL"
        )
    return pool


def free(pool: ConnectionPool) -> bool:
    """Whether ``pool`` hands a connection out now without waiting."""
    return bool(pool._available_connections) or len(pool._in_use_connections) < pool.max_connections


def in_use(pool: ConnectionPool) -> int:
    """Connections of ``pool`` taken now (a listener's, or a command's under way)."""
    return len(pool._in_use_connections)


def connected(pool: ConnectionPool) -> int:
    """Connections of ``pool`` open to Redis now (a pool connects lazily, and keeps what it opened)."""
    kept: Iterable[AbstractConnection] = (*pool._available_connections, *pool._in_use_connections)
    return sum(1 for connection in kept if connection.is_connected)


@dataclass(frozen=True)
class RedisConnections:
    """A process's connections to its cluster's Redis now, for ``/metrics``."""

    limit: int  # cluster.redis_connections
    open: int  # connected now: the pool's and the watch's
    in_use: int  # taken now: the listeners' and the commands' under way (the watch's included)
    waits: int  # commands that found every connection in use, since the start
    waited: float  # seconds they waited, together


def measure(pool: BoundedPool, watch: ConnectionPool) -> RedisConnections:
    """``pool``'s figures and the connection watch's (``watch``: its pool of one)."""
    return RedisConnections(
        limit=pool.max_connections + WATCHES,
        open=connected(pool) + connected(watch),
        in_use=in_use(pool) + in_use(watch),
        waits=pool.waits.count,
        waited=pool.waits.seconds,
    )
