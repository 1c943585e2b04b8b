"""The leader lease: one process of a cluster at a time runs what may run only once per bot.

Telegram answers a second ``getUpdates`` caller with 409, Discord sends every event to every
connection of a shard, and APScheduler and the idle-review sweeper would fire once per process. So
one elected process runs them — its *duties* — while it holds a lease in Redis:

The lease is a :class:`gateway.cluster.leases.lease.RedisLease` kept by a :class:`resilience.renewal.Renewer`
whose policy is the strictest of the cluster's (the holder fences itself, and distrusts the lease when
the connection breaks):

- **Winning**: the lease is taken when free. Its value names this process and a term (a fresh random
  part per campaign), so a renewal or a release never touches another term's lease.
- **Holding**: every ``ttl/3`` the lease is extended while it still holds this term's value
  (compare-and-expire).
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
- **After Redis was away**, a process that wins waits until ``ttl`` has passed since it last saw Redis
  away (a broken connection, a failed try to win) before its duties start: a Redis that restarted
  empty may have forgotten a lease whose holder has not noticed yet (its own connection watch may be
  late on a loaded machine), and that holder steps down at most ``ttl/2`` after its last renewal,
  which was sent before Redis went away. So the margin is the same as after an expiry.
- **Campaigning**: a process that does not lead tries to win every ``ttl/3``, or just after the
  lease's expiry (``PTTL``) when that comes sooner, so a dead leader's duties run again elsewhere
  within ``ttl`` of its last renewal; a leader that stops (shutdown) or steps down releases the lease
  (compare-and-delete) and announces it (``gateway.cluster.watch``): a process that hears it
  (:meth:`Leadership.released`) tries at once, so a graceful stop hands the lease over without waiting
  (a notice missed costs the wait until the next try).
- A duty that fails to start ends the term: what started stops, the lease is released and the process
  campaigns again after a pause (another process may fare better).

The election runs as a :class:`resilience.loops.BackgroundLoop`: an unexpected exception is logged and
the loop goes on (a renewal that stays broken ends the term at ``ttl/2``, as above).

Duties are async context managers, entered in order once elected and exited in reverse order when
the term ends. Exiting must be quick (it races the lease's expiry) and should not raise (an exception
is logged). Never concurrently: two terms of one :class:`Leadership`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from redis.asyncio import Redis

from gateway.cluster.leases.lease import RedisLease, holder_value
from gateway.cluster.redis import RedisUnavailable, redis_key
from resilience.loops import BackgroundLoop
from resilience.renewal import Loss, Policy, Renewer

log = logging.getLogger(__name__)

LEADER_KEY = redis_key("leader")
FAILED_DUTY_PAUSE = 5.0  # seconds before campaigning again after a duty failed to start

Duty = Callable[[], AbstractAsyncContextManager[object]]


def leader_policy(ttl: float) -> Policy:
    """Trusted for half the TTL after each renewal was sent; given up then, or when Redis is lost."""
    return Policy(ttl, trust=ttl / 2, fence=True, distrust_on_break=True)


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
        self.redis = redis
        self.instance_id = instance_id
        self.ttl = ttl
        self.key = key
        self.clock = clock
        self.policy = leader_policy(ttl)
        self._duties: list[tuple[str, Duty]] = []
        self._renewer: Renewer | None = None  # the lease of the current try to win, or of the term
        self._leading = False
        self.terms = 0  # how many times this process won
        self._election = BackgroundLoop(f"the leader election ({instance_id})", self.run)
        self._resigned = False
        self._redis_away_at: float | None = None  # when this process last saw Redis away (see the module)
        self._freed = asyncio.Event()  # set: the lease was announced released; try to win now

    @property
    def interval(self) -> float:
        """Seconds between renewals, and between tries to win."""
        return self.policy.interval

    @property
    def leading(self) -> bool:
        """Whether this process holds the lease now (from the win until it stepped down)."""
        return self._leading

    def holds(self) -> bool:
        """Whether the lease is this process's by its own clock right now: leading, and the step-down
        deadline not passed. Duties that act repeatedly (a poll) ask before each act, so a process
        woken from a pause longer than its lease does nothing before it notices it stepped down."""
        return self._leading and self._renewer is not None and self._renewer.trusted()

    def suspect(self) -> None:
        """The connection to Redis broke: Redis may have forgotten the lease, so a term under way ends
        now (``holds`` is False at once, the duties stop). Returns at once."""
        self._redis_away_at = self.clock()
        if self._renewer is not None:
            self._renewer.suspect()

    def released(self, key: str) -> None:
        """A lease was announced released (``ConnectionWatch.on_released``): if it is this one, a
        campaign under way tries to win now. Returns at once."""
        if key == self.key:
            self._freed.set()

    def add_duty(self, name: str, duty: Duty) -> None:
        """Run ``duty()`` while leading; before :meth:`run` only."""
        self._duties.append((name, duty))

    @asynccontextmanager
    async def campaigning(self) -> AsyncIterator[Leadership]:
        """Run :meth:`run` in the background for the life of the block; on exit :meth:`resign`."""
        self._election.start()
        try:
            yield self
        finally:
            await self.resign()

    async def resign(self) -> None:
        """Stop campaigning: a term under way ends (duties stop, the lease is released). Idempotent."""
        self._resigned = True  # also when a library swallows the cancellation: run() ends all the same
        await self._election.stop()

    async def run(self) -> None:
        """Campaign and lead until cancelled (or resigned)."""
        while not self._resigned:
            won = await self._campaign()
            if won is None:
                return
            if self._resigned:  # won just as it resigned: give the lease back at once
                await self._give_back(won[0])
                return
            failed = await self._lead(*won)
            if failed and not self._resigned:
                await asyncio.sleep(FAILED_DUTY_PAUSE)

    # --- campaigning ------------------------------------------------------------------------------

    async def _campaign(self) -> tuple[RedisLease, Renewer] | None:
        """Try to win every ``interval`` (or just after the lease lapses) until it works; the lease won
        and its renewer (None: resigned meanwhile)."""
        failing = False
        lease = RedisLease(self.redis, self.key, holder_value(self.instance_id), self.ttl, announce=True)
        while not self._resigned:
            self._freed.clear()  # a release announced from here on wakes the wait below
            renewer = self._renewer = Renewer(
                lease, self.policy, name="the leader lease", on_lost=self._lost, clock=lambda: self.clock()
            )
            attempt = renewer.attempt()
            pause = self.interval
            try:
                async with asyncio.timeout(self.interval):
                    holder = await lease.take()
            except (RedisUnavailable, TimeoutError) as error:
                self._redis_away_at = self.clock()
                if not failing:
                    log.warning("cannot campaign for the leader lease (%s); trying again", _text(error))
                failing = True
            else:
                if failing:
                    log.info("Redis answers again; campaigning for the leader lease")
                failing = False
                if holder is None:
                    if renewer.confirm(attempt):
                        return lease, renewer
                    continue  # won across a connection break: Redis may have forgotten it; take it again
                pause = holder.retry_in(self.interval)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, attempt.sent + pause - self.clock())):
                    await self._freed.wait()
        self._renewer = None
        return None

    # --- leading ----------------------------------------------------------------------------------

    async def _lead(self, lease: RedisLease, renewer: Renewer) -> bool:
        """One term: the duties run until the lease is lost or a duty fails (True) or until cancelled."""
        self._leading = True
        self.terms += 1
        log.info("%s leads now (leader lease %s, %.0fs)", self.instance_id, self.key, self.ttl)
        duties = asyncio.create_task(self._run_duties(), name="leader duties")
        renewer.start()
        try:
            await asyncio.wait({duties, renewer.task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            duties.cancel()  # the lease is renewed while they stop, unless the lease is what was lost
            stopping = self.clock()
            await asyncio.wait({duties})  # the duties' exits run to their end
            self._leading = False
            await renewer.stop()
            took = self.clock() - stopping
            if took > self.ttl / 2:
                log.error("stopping the leader's duties took %.1fs, more than leader_ttl/2", took)
            await self._give_back(lease)
            log.info("%s stepped down", self.instance_id)
        return not duties.cancelled() and duties.exception() is not None

    def _lost(self, loss: Loss) -> None:
        if loss is Loss.BROKEN:
            log.warning("the connection to Redis broke: stepping down (Redis may have forgotten the lease)")
        elif loss is Loss.LAPSED:
            log.error("no leader lease renewal within leader_ttl/2 (%.1fs): stepping down", self.ttl / 2)
        else:
            log.error("the leader lease expired or was taken: stepping down")

    async def _run_duties(self) -> None:
        await self._wait_out_a_forgotten_leader()
        async with AsyncExitStack() as stack:
            for name, duty in self._duties:
                try:
                    await stack.enter_async_context(_logged_exit(name, duty()))
                except Exception:
                    log.exception("the leader's duty %r failed to start; stepping down", name)
                    raise
            await asyncio.Future()  # until the term ends (cancelled)

    async def _wait_out_a_forgotten_leader(self) -> None:
        """Won soon after Redis was away: wait until ``ttl`` has passed since (see the module)."""
        if self._redis_away_at is None:
            return
        pause = self._redis_away_at + self.ttl - self.clock()
        if pause > 0:
            away = self.clock() - self._redis_away_at
            log.info("Redis was away %.1fs ago: the leader's duties start in %.1fs, when a leader it may "
                     "have forgotten has surely stepped down", away, pause)  # fmt: skip
            await asyncio.sleep(pause)

    async def _give_back(self, lease: RedisLease) -> None:
        """Release the lease if it is still this term's (best effort: it expires anyway)."""
        try:
            async with asyncio.timeout(self.interval):
                await lease.release()
        except (RedisUnavailable, TimeoutError) as error:
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


def _text(error: BaseException) -> str:
    return str(error) or type(error).__name__
