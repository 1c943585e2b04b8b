"""How long to wait before trying again: one policy for every retry in Herald.

Capped exponential backoff, ``first * 2**(n-1)`` seconds after the n-th failure in a row, at most
``cap``, times a jitter of ±:data:`JITTER` so that processes or chats that failed together do not
retry in lockstep. A server's own ``retry_after`` (a 429's Retry-After) wins when it is positive: it
knows when capacity returns; zero or absent, the backoff applies (so nothing retries at full speed).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

JITTER = 0.25  # each delay is the formula's times a random factor in [1 - JITTER, 1 + JITTER]
_MAX_DOUBLINGS = 64  # past this the cap has long been reached (and 2.0**n stays a float)
_RNG = random.Random()


@dataclass(frozen=True)
class Backoff:
    """The waits of one kind of retry: ``first`` seconds after the first failure, doubling to ``cap``."""

    first: float
    cap: float
    jitter: float = JITTER

    def __post_init__(self) -> None:
        if self.first < 0 or self.cap < self.first or not 0 <= self.jitter < 1:
            raise ValueError(f"a backoff needs 0 <= first <= cap and 0 <= jitter < 1 (got {self})")

    def delay(
        self, failures: int, *, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait after ``failures`` failures in a row (1, 2, ...)."""
        if retry_after is not None and retry_after > 0:
            return retry_after
        doublings = min(max(failures, 1) - 1, _MAX_DOUBLINGS)
        return self._jittered(min(self.cap, self.first * 2.0**doublings), rng)

    def longest(self, rng: random.Random | None = None) -> float:
        """The cap, jittered: for a failure that is known to last (another process polls the bot)."""
        return self._jittered(self.cap, rng)

    def _jittered(self, seconds: float, rng: random.Random | None) -> float:
        return seconds * (rng or _RNG).uniform(1 - self.jitter, 1 + self.jitter)


@dataclass
class Streak:
    """Failures in a row of one thing being retried: counts them and says how long to wait each time;
    :meth:`reset` on success. An operator reads the first failure and the recovery, so the count is
    what the recovery line reports."""

    backoff: Backoff
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self, *, retry_after: float | None = None, longest: bool = False) -> float:
        """Count a failure; the wait before the next try (``longest``: the cap)."""
        self.failures += 1
        if longest:
            return self.backoff.longest(self.rng)
        return self.backoff.delay(self.failures, retry_after=retry_after, rng=self.rng)

    def reset(self) -> int:
        """Forget the streak; returns how many failures it had."""
        failures, self.failures = self.failures, 0
        return failures
