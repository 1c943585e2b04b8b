"""Failed console logins are limited per client address: :data:`FAILURES` in :data:`WINDOW_SECONDS`.

A moving window of the ``limits`` library, as the send budget uses: in memory for one process, in Redis
for a cluster (so going round the processes behind a load balancer gains nothing). When the cluster's
Redis cannot be reached, this process's own count applies (the console must stay usable to see what is
wrong).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from limits import RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

FAILURES = 10
WINDOW_SECONDS = 900
_LIMIT = RateLimitItemPerSecond(FAILURES, WINDOW_SECONDS)


class LoginAttempts:
    def __init__(self, redis: Redis | None = None) -> None:
        self._local = MovingWindowRateLimiter(MemoryStorage())
        self._shared: MovingWindowRateLimiter | None = None
        self._redis_errors: tuple[type[BaseException], ...] = ()  # what the shared count may raise
        if redis is not None:
            # redis-py: cluster mode only (a single process never loads it)
            from limits.aio.storage import RedisStorage, Storage

            from gateway.cluster.redis_errors import ANY_REDIS_ERROR

            self._redis_errors = ANY_REDIS_ERROR
            pool: dict[str, Any] = {"connection_pool": redis.connection_pool}
            storage: Storage = RedisStorage(
                "async+redis://", implementation="redispy", key_prefix="herald:console:logins", **pool
            )
            self._shared = MovingWindowRateLimiter(storage)

    async def blocked_for(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        for limiter in self._limiters():
            try:
                if await limiter.test(_LIMIT, address):
                    return 0.0
                stats = await limiter.get_window_stats(_LIMIT, address)
                return max(1.0, stats.reset_time - time.time())
            except self._redis_errors as error:
                log.warning("console logins are counted in this process only (Redis: %s)", error)
        return 0.0

    async def failed(self, address: str) -> None:
        """Count a failed login of ``address``."""
        await self._local.hit(_LIMIT, address)
        if self._shared is not None:
            try:
                await self._shared.hit(_LIMIT, address)
            except self._redis_errors as error:
                log.warning("a failed console login was counted in this process only (Redis: %s)", error)

    def _limiters(self) -> list[MovingWindowRateLimiter]:
        return [self._shared, self._local] if self._shared is not None else [self._local]
