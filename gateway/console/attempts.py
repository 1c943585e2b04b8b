"""Failed console logins slow down the next failures from the same client address; they lock nobody out.

A correct token or a fresh login link always logs in at once, however many failures came from its
address: behind a reverse proxy every browser has the proxy's address, and a limit that refused the
right credential would let anyone keep the operator out with a few bad tries. Instead the answer to each
failure is held back for a delay that grows with the address's recent failures (:func:`delay_after`):
the first :data:`FREE_FAILURES` (typing errors) are answered at once, then after 1 s, 2 s, 4 s ... up to
:data:`LONGEST_DELAY`, so a guesser that waits for its answers gets a few hundred tries an hour. The delay
is bounded twice, so it cannot be turned against the server: no answer waits longer than LONGEST_DELAY,
and at most :data:`MOST_HELD` failures wait at once in a process (a failure beyond them is refused at
once with 429). A guesser sending many tries at once still learns each answer (a right one would log in
at once): what keeps guessers out is the token's length (``auth.MIN_TOKEN_CHARS``) and the links' 32
random bytes; the delay is a brake, never a lock.

Failures are counted in a moving window of :data:`WINDOW_SECONDS` of the ``limits`` library, as the
send pacing counts: in memory for one process, in Redis for a cluster (so going round the processes
behind a load balancer gains nothing). When the cluster's Redis cannot be reached, this process's own
count applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from limits import RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

FREE_FAILURES = 3  # answered at once: someone mistyping the token
LONGEST_DELAY = 16.0  # seconds; the most any failure's answer is held back
MOST_HELD = 32  # failures held back at once in one process, at most
WINDOW_SECONDS = 900
_COUNTED = FREE_FAILURES + 5  # enough to reach LONGEST_DELAY: the window counts no further
_WINDOW = RateLimitItemPerSecond(_COUNTED, WINDOW_SECONDS)

Sleep = Callable[[float], Awaitable[None]]


def delay_after(failures: int) -> float:
    """Seconds the answer to an address's ``failures``-th failure in the window is held back."""
    if failures <= FREE_FAILURES:
        return 0.0
    return min(LONGEST_DELAY, 2.0 ** (failures - FREE_FAILURES - 1))


class LoginAttempts:
    """Counts failed logins per address and holds their answers back; ``sleep`` waits out a delay."""

    def __init__(
        self, redis: Redis | None = None, *, sleep: Sleep = asyncio.sleep, most_held: int = MOST_HELD
    ) -> None:
        self.sleep = sleep
        self.most_held = most_held
        self._held = 0  # failures waiting out their delay now
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

    async def failed(self, address: str) -> bool:
        """Count a failed login of ``address`` and wait out the delay its recent failures earn. False (at
        once) when :attr:`most_held` failures are waiting already: refuse this one as one too many."""
        delay = delay_after(await self._count(address))
        if delay <= 0:
            return True
        if self._held >= self.most_held:
            log.warning("console: %d failed logins are held back already; refused one from %s at once",
                        self._held, address)  # fmt: skip
            return False
        self._held += 1
        try:
            await self.sleep(delay)
        finally:
            self._held -= 1
        return True

    async def _count(self, address: str) -> int:
        """Record a failure of ``address``: its failures in the window now (counted up to _COUNTED)."""
        await self._local.hit(_WINDOW, address)
        if self._shared is not None:
            try:
                await self._shared.hit(_WINDOW, address)
                stats = await self._shared.get_window_stats(_WINDOW, address)
                return _COUNTED - stats.remaining
            except self._redis_errors as error:
                log.warning("a failed console login was counted in this process only (Redis: %s)", error)
        stats = await self._local.get_window_stats(_WINDOW, address)
        return _COUNTED - stats.remaining
