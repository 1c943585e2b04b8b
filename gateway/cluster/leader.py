"""The leader lease: one process of a cluster at a time runs what may run only once per bot.

Telegram answers a second ``getUpdates`` caller with 409, Discord sends every event to every
connection of a shard, and APScheduler and the idle-review sweeper would fire once per process. So
one elected process runs them — its *duties* — while it holds a lease in Redis:

- **Winning**: ``SET key value NX PX ttl``. ``value`` names this process and a term (a fresh random
  part per win), so a renewal or a release never touches another term's lease.
- **Holding**: every ``ttl/3`` a Lua script extends the lease only while it still holds this term's
  value (compare-and-pexpire).
- **Stepping down on its own**: a renewal sent at ``t`` keeps the lease in Redis until at least
  ``t + ttl``. The leader stops its duties once ``ttl/2`` has passed since the last successful
  renewal (or the win) was *sent* — whether Redis is down, slow or partitioned away — and at once when
  a renewal finds the lease gone or someone else's. Its duties therefore stop ``ttl/2`` before anyone
  else can win, so at most one process believes it leads at any moment (this needs clocks that tick at
  about the same rate, not clocks in sync).
- **Stepping down at once** when the connection to Redis breaks (:meth:`Leadership.suspect`, called by
  ``gateway.cluster.watch``): a Redis that restarts empty forgets the lease, and another process could
  win it as soon as Redis is back. The break is seen before that, so the duties stop before anybody
  else can start them; the process then campaigns again like any other.
- **Campaigning**: a process that does not lead tries to win every ``ttl/3``, or just after the
  lease's expiry (``PTTL``) when that comes sooner, so a dead leader's duties run again elsewhere
  within ``ttl`` of its last renewal; a leader that stops (shutdown) releases the lease
  (compare-and-delete) and the next process takes over at its next try.
- A duty that fails to start ends the term: what started stops, the lease is released and the process
  campaigns again after a pause (another process may fare better).

The election and the renewals run ``gateway.cluster.supervision.supervised``: an unexpected exception
is logged and the loop goes on (a renewal that stays broken ends the term at ``ttl/2``, as above).

Duties are async context managers, entered in order once elected and exited in reverse order when
the term ends. Exiting must be quick (it races the lease's expiry) and should not raise (an exception
is logged). Never concurrently: two terms of one :class:`Leadership`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.cluster.redis import COMPARE_AND_DELETE, redis_key
from gateway.cluster.supervision import supervised

log = logging.getLogger(__name__)

LEADER_KEY = redis_key("leader")
FAILED_DUTY_PAUSE = 5.0  # seconds before campaigning again after a duty failed to start
RETRY_FRACTION = 0.1  # a failed renewal is tried again after ttl * this
EXPIRY_MARGIN = 0.02  # seconds after a taken lease's expiry that the next try is made

# KEYS[1] the lease, ARGV[1] this term's value, ARGV[2] the TTL in ms: 1 when extended, 0 when not ours.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
RELEASE = COMPARE_AND_DELETE  # KEYS[1] the lease, ARGV[1] this term's value

Duty = Callable[[], AbstractAsyncContextManager[object]]
REDIS_ERRORS = (RedisError, OSError, TimeoutError)


@dataclass
class _Term:
    value: str
    renewed_at: float  # when the last renewal that succeeded (or the win) was sent
    ttl: float
    over: bool = False  # the lease is lost, or the term ended: renew no more, act no more

    @property
    def deadline(self) -> float:
        """When the leader steps down without a further successful renewal."""
        return self.renewed_at + self.ttl / 2


class Leadership:
    """Campaigns for ``key`` as ``instance_id`` and runs the duties while it leads (see the module).

    ``run`` is the whole life: campaign, lead, step down, campaign again, until cancelled (which ends
    a term first: duties stop, the lease is released). ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        redis: Redis,
        instance_id: str,
        ttl: float,
        *,
        key: str = LEADER_KEY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl <= 0:
            raise ValueError("the leader lease's ttl must be positive")
        self.redis = redis
        self.instance_id = instance_id
        self.ttl = ttl
        self.key = key
        self.clock = clock
        self._duties: list[tuple[str, Duty]] = []
        self._renew = redis.register_script(RENEW)
        self._release = redis.register_script(RELEASE)
        self._term: _Term | None = None
        self._keeper: asyncio.Task[None] | None = None  # the current term's renewals
        self._breaks = 0  # connection breaks so far: a win answered across one is confirmed first
        self.terms = 0  # how many times this process won
        self._running: asyncio.Task[None] | None = None
        self._resigned = False

    @property
    def interval(self) -> float:
        """Seconds between renewals, and between tries to win."""
        return self.ttl / 3

    @property
    def leading(self) -> bool:
        """Whether this process holds the lease now (from the win until it stepped down)."""
        return self._term is not None

    def holds(self) -> bool:
        """Whether the lease is this process's by its own clock right now: leading, and the step-down
        deadline not passed. Duties that act repeatedly (a poll) ask before each act, so a process
        woken from a pause longer than its lease does nothing before it notices it stepped down."""
        term = self._term
        return term is not None and not term.over and self.clock() < term.deadline

    def suspect(self) -> None:
        """The connection to Redis broke: Redis may have forgotten the lease, so a term under way ends
        now (``holds`` is False at once, the duties stop). Returns at once."""
        self._breaks += 1
        term, keeper = self._term, self._keeper
        if term is None or term.over or keeper is None:
            return
        log.warning("the connection to Redis broke: stepping down (Redis may have forgotten the lease)")
        term.over = True
        keeper.cancel()

    def add_duty(self, name: str, duty: Duty) -> None:
        """Run ``duty()`` while leading; before :meth:`run` only."""
        self._duties.append((name, duty))

    @asynccontextmanager
    async def campaigning(self) -> AsyncIterator[Leadership]:
        """Run :meth:`run` in a task for the life of the block; on exit :meth:`resign`."""
        if self._running is not None:
            raise RuntimeError("already campaigning")
        self._running = asyncio.create_task(
            supervised("the leader election", self.run), name=f"leader election {self.instance_id}"
        )
        try:
            yield self
        finally:
            await self.resign()

    async def resign(self) -> None:
        """Stop campaigning: a term under way ends (duties stop, the lease is released). Idempotent."""
        self._resigned = True  # also when a library swallows the cancellation: run() ends all the same
        task = self._running
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """Campaign and lead until cancelled (or resigned)."""
        while not self._resigned:
            term = await self._campaign()
            if term is None:
                return
            if self._resigned:  # won just as it resigned: give the lease back at once
                await self._give_back(term)
                return
            failed = await self._lead(term)
            if failed and not self._resigned:
                await asyncio.sleep(FAILED_DUTY_PAUSE)

    # --- campaigning ------------------------------------------------------------------------------

    async def _campaign(self) -> _Term | None:
        """Try to win every ``interval`` until it works (None: resigned meanwhile)."""
        failing = False
        while not self._resigned:
            value = f"{self.instance_id}/{secrets.token_hex(8)}"
            sent, breaks = self.clock(), self._breaks
            pause = self.interval
            try:
                async with asyncio.timeout(self.interval):
                    if await self.redis.set(self.key, value, nx=True, px=milliseconds(self.ttl)):
                        won = True
                    else:
                        won, pause = False, expiry_pause(await self.redis.pttl(self.key), self.interval)
            except REDIS_ERRORS as error:
                if not failing:
                    log.warning(
                        "cannot campaign for the leader lease (Redis: %s); trying again", _text(error)
                    )
                failing = True
            else:
                if failing:
                    log.info("Redis answers again; campaigning for the leader lease")
                failing = False
                if won and breaks != self._breaks:  # Redis may have forgotten it already
                    confirmed = await self._confirm(value)
                    if confirmed is None:
                        continue
                    sent = confirmed
                if won:
                    return _Term(value, sent, self.ttl)
            await asyncio.sleep(max(0.0, sent + pause - self.clock()))
        return None

    async def _confirm(self, value: str) -> float | None:
        """Renew a lease just won across a connection break: when it was sent (the term counts from
        then), or None when Redis no longer has it (or cannot say) and the campaign goes on."""
        sent, breaks = self.clock(), self._breaks
        try:
            async with asyncio.timeout(self.interval):
                renewed = await self._renew(keys=[self.key], args=[value, milliseconds(self.ttl)])
        except REDIS_ERRORS:
            return None
        return sent if renewed and breaks == self._breaks else None

    # --- leading ----------------------------------------------------------------------------------

    async def _lead(self, term: _Term) -> bool:
        """One term: the duties run until the lease is lost or a duty fails (True) or until cancelled."""
        self._term = term
        self.terms += 1
        log.info("%s leads now (leader lease %s, %.0fs)", self.instance_id, self.key, self.ttl)
        duties = asyncio.create_task(self._run_duties(), name="leader duties")
        keeper = self._keeper = asyncio.create_task(
            supervised("the leader lease's renewal", lambda: self._keep(term)), name="leader lease renewal"
        )
        try:
            await asyncio.wait({duties, keeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            duties.cancel()  # the keeper renews while they stop, unless the lease is what was lost
            stopping = self.clock()
            await asyncio.wait({duties})  # the duties' exits run to their end
            term.over = True
            keeper.cancel()
            await asyncio.wait({keeper})
            self._term = None
            took = self.clock() - stopping
            if took > self.ttl / 2:
                log.error("stopping the leader's duties took %.1fs, more than leader_ttl/2", took)
            await self._give_back(term)
            log.info("%s stepped down", self.instance_id)
        return not duties.cancelled() and duties.exception() is not None

    async def _run_duties(self) -> None:
        async with AsyncExitStack() as stack:
            for name, duty in self._duties:
                try:
                    await stack.enter_async_context(_logged_exit(name, duty()))
                except Exception:
                    log.exception("the leader's duty %r failed to start; stepping down", name)
                    raise
            await asyncio.Future()  # until the term ends (cancelled)

    async def _keep(self, term: _Term) -> None:
        """Renew until the lease is lost (returns) or the term is cancelled."""
        next_at = term.renewed_at + self.interval
        failing = False
        while not term.over:
            now = self.clock()
            if now >= term.deadline:
                log.error(
                    "no leader lease renewal for %.1fs (leader_ttl/2): stepping down", now - term.renewed_at
                )
                term.over = True
                return
            await asyncio.sleep(max(0.0, min(next_at, term.deadline) - now))
            sent = self.clock()
            if sent >= term.deadline:
                continue
            try:
                async with asyncio.timeout(term.deadline - sent):
                    renewed = await self._renew(keys=[self.key], args=[term.value, milliseconds(self.ttl)])
            except REDIS_ERRORS as error:
                if not failing:
                    log.warning("cannot renew the leader lease (Redis: %s); trying again", _text(error))
                failing = True
                next_at = self.clock() + self.ttl * RETRY_FRACTION
                continue
            if not renewed:
                log.error("the leader lease expired or was taken: stepping down")
                term.over = True
                return
            if failing:
                log.info("the leader lease is renewed again")
            failing = False
            term.renewed_at = sent
            next_at = sent + self.interval

    async def _give_back(self, term: _Term) -> None:
        """Release the lease if it is still this term's (best effort: it expires anyway)."""
        try:
            async with asyncio.timeout(self.interval):
                await self._release(keys=[self.key], args=[term.value])
        except REDIS_ERRORS as error:
            log.info("could not release the leader lease (it expires by itself): %s", _text(error))


@asynccontextmanager
async def _logged_exit(name: str, duty: AbstractAsyncContextManager[object]) -> AsyncIterator[None]:
    """Enter ``duty``; on exit, log what its exit raised instead of skipping the other duties' exits."""
    await duty.__aenter__()
    try:
        yield
    finally:
        try:
            await duty.__aexit__(None, None, None)
        except Exception:
            log.exception("stopping the leader's duty %r failed", name)


def expiry_pause(pttl: int, interval: float) -> float:
    """How long to wait before trying a taken lease again: until just after it expires (``PTTL`` in ms),
    so a dead holder's lease is taken over within its TTL, but never longer than ``interval``."""
    if pttl == -2:  # gone meanwhile: at once
        return EXPIRY_MARGIN
    if pttl < 0:  # no TTL (not one of ours): the usual pace
        return interval
    return min(interval, pttl / 1000 + EXPIRY_MARGIN)


def milliseconds(seconds: float) -> int:
    """A TTL in whole milliseconds for ``PX``/``PEXPIRE`` (at least 1)."""
    return max(1, round(seconds * 1000))


def _text(error: BaseException) -> str:
    return str(error) or type(error).__name__
