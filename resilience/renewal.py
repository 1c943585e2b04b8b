"""Keeping a lease alive, and knowing when to stop trusting it: one policy for every lease Herald holds.

A lease (the cluster's leader lease, a Discord shard, a session, a review claim, a process's name, a
slot of a shared cap, an outbox item's claim, a session's row in the database) lives ``ttl`` seconds
in its store unless renewed. Its holder keeps it with a :class:`Renewer`:

- **Renewing** every :attr:`Policy.every` seconds (a third of the TTL unless the holder needs sooner);
  a renewal that fails (the store away, no answer in time, an error nobody foresaw) is tried again
  after a tenth of the TTL. The first failure of a streak is one warning (with the traceback when the
  error is not the store being away: :class:`~resilience.unreachable.Unreachable`), the recovery one
  line; the tries between are debug.
- **Trust** (:meth:`Renewer.trusted`): a renewal *sent* at ``t`` that the store confirmed keeps the
  lease there until at least ``t + ttl``, so a holder may act on it until ``t + trust`` by its own clock
  (the time the answer took counts against it). A holder that must **fence itself** (``fence``: the
  leader, a shard, whose acts nothing else fences) gives the lease up once that span passed without a
  new confirmation, whether its store is down, slow or partitioned away; each renewal call is bounded
  by that deadline.
- **Suspicion** (:meth:`Renewer.suspect`, called when the connection to the store broke: it may have
  restarted empty and forgotten the lease): the lease is renewed at once and then every
  :data:`DOUBT_RETRY` seconds until the store answers. With ``distrust_on_break`` it is not trusted
  meanwhile, and a holder that fences itself gives it up at once. An answer to a command sent before a
  break confirms nothing (the store may have forgotten since): it is renewed again.
- **Losing** it: a renewal that finds another holder (:attr:`Renewal.LOST`), or a fenced lease's span
  over, calls ``on_lost`` once with the :class:`Loss` and ends the renewals. What that means is the
  holder's policy (step down, close a shard, cancel a turn); so is whether a lease found gone is taken
  again (the lease's ``renew`` answers :attr:`Renewal.RETAKEN`, logged as a warning).

``on_lost`` runs on the event loop and must return at once (set a flag, cancel a task, wake a loop).
The clock is the running loop's (virtual in tests) unless one is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from resilience.loops import BackgroundLoop
from resilience.unreachable import Unreachable

log = logging.getLogger(__name__)

DOUBT_RETRY = 0.2  # seconds between renewals of a lease the store may have forgotten, until one answers
RETRY_FRACTION = 0.1  # a failed renewal is tried again after ttl * this (or sooner: ``every``)


class Renewal(enum.Enum):
    """What the lease's store answered to a renewal."""

    HELD = "held"  # still this holder's: extended
    RETAKEN = "retaken"  # it had gone (lapsed, or the store forgot it) and was taken again
    LOST = "lost"  # another holder has it, or it is gone and the holder does not take it again


class Loss(enum.Enum):
    """Why a lease was given up (``on_lost``)."""

    TAKEN = "taken"  # a renewal found it another's (or gone)
    LAPSED = "lapsed"  # fenced: no renewal confirmed it within the trusted span
    BROKEN = "broken"  # fenced and distrusting: the connection to its store broke


class Renewable(Protocol):
    """A lease as a :class:`Renewer` sees it. ``renew`` raises when the store could not say."""

    async def renew(self) -> Renewal: ...


@dataclass(frozen=True)
class Policy:
    """How a holder keeps its lease (see the module). ``trust`` None: the lease is trusted while held
    (its holder's acts are fenced elsewhere, or need no fence)."""

    ttl: float
    every: float | None = None  # seconds between renewals; None: ttl / 3
    trust: float | None = None  # seconds after a confirmed renewal was sent that the lease is trusted
    fence: bool = False  # the trusted span over without a new confirmation: give the lease up
    distrust_on_break: bool = False  # a broken connection ends the trust until a renewal confirms it

    def __post_init__(self) -> None:
        if self.ttl <= 0 or (self.every is not None and self.every <= 0):
            raise ValueError(f"a lease's ttl and renewal interval must be positive (got {self})")
        if self.fence and self.trust is None:
            raise ValueError("a lease whose holder fences itself needs a trusted span")

    @property
    def interval(self) -> float:
        return self.every if self.every is not None else self.ttl / 3

    @property
    def retry(self) -> float:
        return min(self.interval, self.ttl * RETRY_FRACTION)


@dataclass(frozen=True)
class Attempt:
    """When a command about the lease was sent, and how many connection breaks had been heard then."""

    sent: float
    breaks: int


class Renewer:
    """Keeps ``lease`` alive under ``policy`` (see the module); ``name`` says what it is in the log
    ("the leader lease"). The holder confirms the take (:meth:`confirm`), then starts the renewals
    (:meth:`start`), and stops them (:meth:`stop`) before it releases the lease."""

    def __init__(
        self,
        lease: Renewable,
        policy: Policy,
        *,
        name: str,
        on_lost: Callable[[Loss], None] = lambda _: None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.lease = lease
        self.policy = policy
        self.name = name
        self._on_lost = on_lost
        self._clock = clock
        self._confirmed_at: float | None = None  # when the last confirmed command was sent
        self._next = 0.0  # when the next renewal is due
        self._breaks = 0
        self._doubt = False  # a break was heard and no renewal has confirmed the lease since
        self._failures = 0  # failed renewals in a row
        self._lost: Loss | None = None
        self._stopped = False
        self._wake = asyncio.Event()
        self._loop = BackgroundLoop(f"the renewal of {name}", self.run)
        self.renewals = 0  # renewals sent (tests and logs)

    # --- what the holder asks -----------------------------------------------------------------------

    def now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    @property
    def lost(self) -> Loss | None:
        """Why the lease was given up; None while it is held."""
        return self._lost

    @property
    def deadline(self) -> float | None:
        """Until when the lease is trusted without a further confirmation (None: no span, or never
        confirmed)."""
        if self._confirmed_at is None or self.policy.trust is None:
            return None
        return self._confirmed_at + self.policy.trust

    def trusted(self) -> bool:
        """Whether the holder may act on the lease now, by its own clock (see the module)."""
        if self._lost is not None or self._stopped or self._confirmed_at is None:
            return False
        if self._doubt and self.policy.distrust_on_break:
            return False
        deadline = self.deadline
        return deadline is None or self.now() < deadline

    def attempt(self) -> Attempt:
        """Note the moment a command about the lease (its take) is sent, for :meth:`confirm`."""
        return Attempt(self.now(), self._breaks)

    def confirm(self, attempt: Attempt) -> bool:
        """The store said the lease is this holder's, answering a command sent at ``attempt``: trusted
        from then, unless the connection broke since (False: then it is renewed at once)."""
        if self._lost is not None:
            return False
        if attempt.breaks != self._breaks:
            self._due(self.now())
            return False
        if self._confirmed_at is None or attempt.sent > self._confirmed_at:
            self._confirmed_at = attempt.sent
        self._doubt = False
        self._next = attempt.sent + self.policy.interval
        return True

    def suspect(self) -> None:
        """The connection to the lease's store broke (see the module). Returns at once."""
        if self._lost is not None or self._stopped:
            return
        self._breaks += 1
        self._doubt = True
        if self.policy.fence and self.policy.distrust_on_break and self._confirmed_at is not None:
            self._lose(Loss.BROKEN)
            return
        self._due(self.now())

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> Renewer:
        """Renew in the background until the lease is lost or :meth:`stop`."""
        self._loop.start()
        return self

    @property
    def task(self) -> asyncio.Task[None]:
        """The renewals' task: done once the lease is lost (or the renewals stopped)."""
        return self._loop.task

    async def stop(self) -> None:
        """Renew no more (before the lease is released). Idempotent. Also when its cancellation is lost
        inside a client library: the renewals end at their next step all the same."""
        self._stopped = True
        self._wake.set()
        await self._loop.stop()

    def cancel(self) -> None:
        """:meth:`stop` without waiting for the renewals' task to end (from a callback)."""
        self._stopped = True
        self._wake.set()
        self._loop.cancel()

    # --- the renewals --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Renew until the lease is lost or the renewals are stopped."""
        while not self._stopped and self._lost is None:
            now = self.now()
            deadline = self.deadline if self.policy.fence else None
            if deadline is not None and now >= deadline:
                self._lose(Loss.LAPSED)
                return
            due = self._next if deadline is None else min(self._next, deadline)
            if now < due:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(due - now):
                        await self._wake.wait()
                self._wake.clear()
                continue
            await self.renew_once()

    async def renew_once(self) -> bool:
        """One renewal now; whether it confirmed the lease."""
        attempt = self.attempt()
        deadline = self.deadline if self.policy.fence else None
        bound = self.policy.interval if deadline is None else deadline - attempt.sent
        self.renewals += 1
        try:
            async with asyncio.timeout(max(0.0, bound)):
                outcome = await self.lease.renew()
        except Exception as error:  # away, no answer in time, or a bug: the lease is not confirmed
            if self._stopped:
                return False
            self._failed(error, bound)
            self._next = self.now() + (DOUBT_RETRY if self._doubt else self.policy.retry)
            return False
        if self._stopped or self._lost is not None:  # let go meanwhile: the holder releases it
            return False
        if outcome is Renewal.LOST:
            self._lose(Loss.TAKEN)
            return False
        if self._failures:
            log.info("%s is renewed again (after %d failed attempt(s))", _capital(self.name), self._failures)
            self._failures = 0
        if outcome is Renewal.RETAKEN:
            log.warning("%s had lapsed (or its store forgot it); taken again", _capital(self.name))
        return self.confirm(attempt)

    def _failed(self, error: Exception, bound: float) -> None:
        self._failures += 1
        if self._failures > 1:
            log.debug("%s: renewal failed again (%s)", _capital(self.name), _describe(error, bound))
        elif isinstance(error, Unreachable | TimeoutError):
            log.warning("cannot renew %s (%s); trying again", self.name, _describe(error, bound))
        else:
            log.error("renewing %s failed unexpectedly; trying again", self.name, exc_info=error)

    def _due(self, when: float) -> None:
        self._next = min(self._next, when)
        self._wake.set()

    def _lose(self, loss: Loss) -> None:
        self._lost = loss
        self._wake.set()
        try:
            self._on_lost(loss)
        except Exception:  # the holder's bug must not keep the renewals from ending
            log.exception("reacting to the loss of %s failed", self.name)


def _describe(error: Exception, bound: float) -> str:
    if isinstance(error, TimeoutError) and not str(error):
        return f"no answer within {bound:.1f}s"
    return " ".join(str(error).split())[:200] or type(error).__name__


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
