"""Spent and reserved money per scope and window, as the gate reads them: fast, and shared where needed.

The database holds what was spent (``agent.store.spending``, written with each request's usage); a
check that read it, and wrote a reservation, for every model request would cost a transaction each
(milliseconds on PostgreSQL). So the gate asks a :class:`SpendCounters`, which keeps the figures where a
check is cheap and loads them from the database when it does not have them:

- :class:`LocalCounters` (one process, the default): in memory. What other processes on the same
  database spent (``herald chat`` next to the gateway) is read again every :data:`REFRESH_SECONDS`, in
  the background.
- ``gateway.cluster.counting.spending.RedisCounters`` (``cluster.redis_url``): in Redis, so every process of a
  cluster checks and reserves atomically against the same figures (one Lua script per check).

Contract:

- :meth:`SpendCounters.take` asks every capped key with :func:`agent.spending.rules.grant` how much of
  a request that can cost up to ``most`` (and needs at least ``least``) it can pay, and when all can pay
  ``least``, reserves the smallest of their answers on each under ``hold`` (all or none) and returns it as
  :class:`Granted`; else the first key that cannot, and where it stands. ``hold`` None only checks.
- :meth:`SpendCounters.settle` is called after the cost was stored in the database: it counts ``cost``
  on the keys the counters know and drops ``hold``'s reservations. :meth:`SpendCounters.release` drops
  them without counting anything (the request failed, or was never sent). Neither raises for a key or a
  hold it does not know.
- A reservation lives :attr:`SpendCounters.hold_ttl` seconds at most (``ttl`` of :meth:`take`, for a
  request that waits longer: a batch): one whose process died (or whose settle never came) stops
  counting then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.spending.rules import grant
from resilience.cancelling import cancel_and_wait

log = logging.getLogger(__name__)

SpendKey = tuple[str, str]  # (scope key, window id)
Loader = Callable[[Sequence[SpendKey]], Awaitable[Mapping[SpendKey, float]]]
"""What the database says was spent, per key (keys without spending may be left out)."""

REFRESH_SECONDS = 1.0
FORGET_AFTER = 3600.0  # a key unused this long (and holding nothing) is dropped from memory


@dataclass(frozen=True)
class Capped:
    """A key to check, with its limit in USD."""

    key: SpendKey
    limit: float


@dataclass(frozen=True)
class Standing:
    spent: float
    reserved: float


@dataclass(frozen=True)
class Granted:
    """What a request may cost: reserved on every capped key (nothing when only checked)."""

    amount: float


@dataclass(frozen=True)
class Shortfall:
    """The first capped key a request does not fit under."""

    capped: Capped
    standing: Standing


class SpendCounters(ABC):
    hold_ttl: float

    @abstractmethod
    async def take(
        self, capped: Sequence[Capped], least: float, most: float, hold: str | None, ttl: float | None = None
    ) -> Granted | Shortfall:
        """Reserve what every key can pay of ``most`` if that is at least ``least``, for ``ttl`` seconds
        (None: :attr:`hold_ttl`); else the first key that cannot."""

    @abstractmethod
    async def settle(self, hold: str | None, keys: Sequence[SpendKey], cost: float) -> None:
        """Count ``cost`` (already stored in the database) on ``keys`` and drop ``hold``."""

    @abstractmethod
    async def release(self, hold: str, keys: Sequence[SpendKey]) -> None:
        """Drop ``hold``'s reservations; nothing is counted."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Stop background work."""


@dataclass
class _Entry:
    spent: float
    loaded_at: float
    local: float = 0.0  # this process's settled cost since it was created (corrects a racing reload)
    holds: dict[str, tuple[float, float]] = field(default_factory=dict)  # hold -> (amount, expires)
    used_at: float = 0.0

    def reserved(self, now: float) -> float:
        expired = [hold for hold, (_, expires) in self.holds.items() if expires <= now]
        for hold in expired:
            del self.holds[hold]
        return sum(amount for amount, _ in self.holds.values())


class LocalCounters(SpendCounters):
    """The figures in this process's memory, loaded from the database on first use and read again every
    :data:`REFRESH_SECONDS` in the background. A check is a few dictionary lookups; it waits for the
    database only the first time it meets a key."""

    def __init__(
        self,
        load: Loader,
        *,
        hold_ttl: float,
        refresh: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.hold_ttl = hold_ttl
        self._refresh_every = refresh
        self._clock = clock
        self._entries: dict[SpendKey, _Entry] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._swept_at = clock()

    async def take(
        self, capped: Sequence[Capped], least: float, most: float, hold: str | None, ttl: float | None = None
    ) -> Granted | Shortfall:
        await self._ensure([c.key for c in capped])
        now = self._clock()  # no await from here on: the check and the reservation are one step
        entries = [self._entries[c.key] for c in capped]
        amount = most
        for limit, entry in zip(capped, entries, strict=True):
            entry.used_at = now
            standing = Standing(entry.spent, entry.reserved(now))
            granted = grant(standing.spent, standing.reserved, least, amount, limit.limit)
            if granted is None:
                return Shortfall(limit, standing)
            amount = granted
        if hold is not None:
            for entry in entries:
                entry.holds[hold] = (amount, now + (self.hold_ttl if ttl is None else ttl))
        self._sweep(now)
        return Granted(amount)

    async def settle(self, hold: str | None, keys: Sequence[SpendKey], cost: float) -> None:
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                continue  # loaded from the database (cost included) when it is first needed
            entry.spent += cost
            entry.local += cost
            if hold is not None:
                entry.holds.pop(hold, None)

    async def release(self, hold: str, keys: Sequence[SpendKey]) -> None:
        for key in keys:
            entry = self._entries.get(key)
            if entry is not None:
                entry.holds.pop(hold, None)

    async def aclose(self) -> None:
        task, self._refreshing = self._refreshing, None
        if task is not None:
            await cancel_and_wait([task])

    async def _ensure(self, keys: Sequence[SpendKey]) -> None:
        """Load the keys not in memory (waiting); start a background reload of stale ones."""
        missing = [key for key in keys if key not in self._entries]
        if missing:
            await self._reload(missing)
        now = self._clock()
        stale = [key for key in keys if now - self._entries[key].loaded_at >= self._refresh_every]
        if stale and (self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.create_task(self._background(stale), name="spend counters reload")

    async def _background(self, keys: Sequence[SpendKey]) -> None:
        try:
            await self._reload(keys)
        except Exception as error:  # the figures in memory stay in use; the next check tries again
            log.warning("could not read spending from the database: %s", error)

    async def _reload(self, keys: Sequence[SpendKey]) -> None:
        """Set the keys' spending to the database's. This process's own settled cost that arrived while
        the read was under way is added back: the read may not have seen it (counted twice at worst
        until the next reload, never missed)."""
        before = {key: entry.local for key in keys if (entry := self._entries.get(key)) is not None}
        loaded = await self._load(keys)
        now = self._clock()
        for key in keys:
            spent = float(loaded.get(key, 0.0))
            entry = self._entries.get(key)
            if entry is None:
                self._entries[key] = _Entry(spent, now, used_at=now)
                continue
            entry.spent = spent + entry.local - before.get(key, 0.0)  # created meanwhile: all of it
            entry.loaded_at = now

    def _sweep(self, now: float) -> None:
        """Forget keys nobody used for :data:`FORGET_AFTER` (at most once a minute)."""
        if now - self._swept_at < 60.0:
            return
        self._swept_at = now
        idle = [key for key, entry in self._entries.items() if now - entry.used_at > FORGET_AFTER]
        for key in idle:
            if not self._entries[key].reserved(now):
                del self._entries[key]

    def known(self) -> Iterable[SpendKey]:
        """The keys in memory (for tests and metrics)."""
        return tuple(self._entries)
