"""The scheduler inside ``herald gateway run``: APScheduler 3 kept in step with the ``cron_jobs`` table.

- At start every enabled job is scheduled with the next run time the table holds. A time that passed
  while the gateway was down is a misfire: APScheduler runs the job once at start-up if the latest
  missed time is at most ``scheduler.misfire_grace`` seconds ago (``misfire_grace_time``), several
  missed times collapse into that one run (``coalesce``), and a job whose latest missed time is older
  is skipped until its next time (recorded as missed, so ``herald cron list`` says so).
- A job never runs twice at once: ``max_instances=1`` here, and the run itself holds the job's session
  lock and claims the occurrence in the table (``runner``, ``jobs``).
- Changes made in this process (the tool, ``/cron``) apply at once; changes made by ``herald cron`` in
  another process are found by reading the table every ``scheduler.poll_interval`` seconds. Only jobs
  whose ``version`` changed are rescheduled, so a run's own bookkeeping never reschedules anything.
- At start, jobs whose makers lost access since (``gateway.cron.standing``) are paused first; a run the
  last process left waiting for a batch (a job marked ``batch``) is resumed, every other run it left
  running is recorded as interrupted.
- Shutdown: no new runs start; running ones get the drain timeout, then are cancelled (recorded as
  interrupted).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from apscheduler.events import EVENT_JOB_MISSED
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from gateway.config import SchedulerSettings
from gateway.cron.describe import when
from gateway.cron.jobs import CronJob, CronJobs, RunStatus
from gateway.cron.runner import CronRunner
from gateway.cron.schedule import ScheduleError, parse_schedule
from resilience.cancelling import cancel_and_wait, wait_event

log = logging.getLogger(__name__)


def _timestamp(value: Any) -> float | None:
    """An APScheduler ``next_run_time`` (an aware datetime or None) as a timestamp."""
    return value.timestamp() if isinstance(value, dt.datetime) else None


class CronScheduler:
    def __init__(
        self, jobs: CronJobs, runner: CronRunner, settings: SchedulerSettings, timezone: dt.tzinfo
    ) -> None:
        self.jobs = jobs
        self.runner = runner
        self.settings = settings
        self.timezone = timezone
        self._aps = self._new_aps()
        self._started = False
        self._versions: dict[str, int] = {}  # job id → the version scheduled (or found unusable)
        self._runs: set[asyncio.Task[Any]] = set()
        self._cancelling = False  # drain() is cancelling the runs still going (see fire)
        self._bookkeeping: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._syncing: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def _new_aps(self) -> AsyncIOScheduler:
        return AsyncIOScheduler(
            timezone=self.timezone,
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": self.settings.misfire_grace,
            },
        )

    async def start(self) -> None:
        """Schedule every enabled job and follow the table; again after :meth:`stop` (a cluster's new
        leader), afresh from the table."""
        if self._aps.running or self._syncing is not None:
            raise RuntimeError("the scheduler is already running")
        if self._started:  # stopped before: a new APScheduler, everything read again
            self._aps, self._versions, self._wake = self._new_aps(), {}, asyncio.Event()
        self._started, self._cancelling = True, False
        resumable = await self.runner.resumable()
        interrupted = await self.jobs.interrupted_runs([job.id for job in resumable])
        if interrupted:
            log.warning("%d scheduled run(s) were cut off by the last shutdown or crash", interrupted)
        await self.runner.pause_lost()  # makers taken off gateway.admins or an allowlist since (logged)
        self._aps.add_listener(self._on_missed, EVENT_JOB_MISSED)
        self._aps.start()
        await self.sync()
        self._unsubscribe = self.jobs.subscribe(self._wake.set)
        self._syncing = asyncio.create_task(self._follow_table(), name="cron sync")
        for job in resumable:
            task = asyncio.create_task(self._resume(job), name=f"cron resume {job.id}")
            self._runs.add(task)
            task.add_done_callback(self._runs.discard)
        log.info("scheduler running: %d job(s)", len(self._aps.get_jobs()))

    async def _resume(self, job: CronJob) -> None:
        try:
            await self.runner.resume(job)
        except Exception:  # the run records its own failures; this is a bug's last line
            log.exception("cron job %s: resuming its run failed", job.id)

    def pause(self) -> None:
        """Start no new runs (shutdown)."""
        if self._aps.running:
            self._aps.pause()

    async def drain(self, timeout: float) -> bool:  # noqa: ASYNC109 - the gateway's drain budget
        """Start no new runs; let running ones finish within ``timeout`` s, then cancel them."""
        self.pause()
        if not self._runs:
            return True
        _, running = await asyncio.wait(set(self._runs), timeout=timeout)
        self._cancelling = bool(running)
        for task in running:
            task.cancel()
        if running:
            log.warning("%d scheduled run(s) cancelled by the shutdown", len(running))
            await asyncio.wait(running, timeout=5.0)
        return not running

    async def stop(self) -> None:
        """Fire nothing more and stop following the table; runs already going go on (each holds its
        job's lock and claimed its occurrence, so a run elsewhere cannot repeat it). Quick: a cluster's
        leader stepping down calls it. :meth:`start` may follow."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        syncing, self._syncing = self._syncing, None
        await cancel_and_wait([t for t in (syncing, *self._bookkeeping) if t is not None])
        if self._aps.running:
            self._aps.shutdown(wait=False)

    async def close(self) -> None:
        """Stop, and cancel the runs still going (recorded as interrupted)."""
        await self.stop()
        await self.drain(0)

    # -- following the table -------------------------------------------------------------------------

    async def _follow_table(self) -> None:
        while True:
            await wait_event(self._wake, self.settings.poll_interval)
            self._wake.clear()
            try:
                await self.sync()
            except Exception:  # a database hiccup must not stop scheduling for good
                log.exception("could not read the scheduled jobs; trying again")

    async def sync(self) -> None:
        """Make the scheduled jobs what the table says: add new ones, reschedule changed ones, drop
        paused and removed ones."""
        wanted = {job.id: job for job in await self.jobs.all() if job.enabled}
        for job_id in list(self._versions):
            if job_id not in wanted:
                del self._versions[job_id]
                if self._aps.get_job(job_id) is not None:
                    self._aps.remove_job(job_id)
        for job in wanted.values():
            if self._versions.get(job.id) != job.version:
                self._versions[job.id] = job.version
                self._schedule(job)

    def _schedule(self, job: CronJob) -> None:
        now = dt.datetime.now(self.timezone)
        try:
            schedule = parse_schedule(job.schedule, self.timezone, now)
        except ScheduleError as error:
            log.error("cron job %s cannot be scheduled: %s", job.id, error)
            return
        options: dict[str, Any] = {}
        if job.next_run_at is not None:  # APScheduler reads an explicit None as "paused"
            options["next_run_time"] = dt.datetime.fromtimestamp(job.next_run_at, self.timezone)
        self._aps.add_job(
            self.fire,
            trigger=schedule.trigger(self.timezone),
            args=[job.id],
            id=job.id,
            name=job.name,
            replace_existing=True,
            **options,
        )

    def scheduled_next(self, job_id: str) -> float | None:
        """When the scheduler will run ``job_id`` next (None: not scheduled)."""
        job = self._aps.get_job(job_id)
        return None if job is None else _timestamp(job.next_run_time)

    # -- runs ------------------------------------------------------------------------------------

    async def fire(self, job_id: str) -> RunStatus | None:
        """What APScheduler runs when a job is due (by now it has moved the job to its following time);
        returns how the run ended (None: not run, e.g. not due or already running)."""
        task = asyncio.current_task()
        if task is not None:
            self._runs.add(task)
        try:
            return await self.runner.run(job_id, next_run_at=self.scheduled_next(job_id))
        except asyncio.CancelledError:
            if not self._cancelling:
                raise
            # Cancelled by drain(): the run is recorded interrupted and the next start resumes it, which
            # drain() logs. Ending here keeps APScheduler from logging a normal shutdown as an error
            # with a traceback (it reports any exception a job raises, a cancellation too).
            return None
        finally:
            if task is not None:
                self._runs.discard(task)

    async def run_now(self, job_id: str) -> RunStatus | None:
        """Run an enabled job at once and wait for it, whatever its time (tests, operators); the
        schedule is left as it is. Returns how the run ended (None: not run)."""
        task = asyncio.current_task()
        if task is not None:
            self._runs.add(task)
        try:
            job = await self.jobs.get(job_id)
            stored = job.next_run_at if job is not None else None
            following = stored if stored is not None else self.scheduled_next(job_id)
            return await self.runner.run(job_id, next_run_at=following, due_only=False)
        finally:
            if task is not None:
                self._runs.discard(task)

    def _on_missed(self, event: Any) -> None:
        """APScheduler skipped a run later than the grace window: record it (off the event loop's
        callback, in a task)."""
        job_id = str(event.job_id)
        late = dt.datetime.now(dt.UTC) - event.scheduled_run_time
        error = (
            f"the run due {when(event.scheduled_run_time.timestamp(), self.timezone)} was skipped: "
            f"{int(late.total_seconds() // 60)} minutes late, more than scheduler.misfire_grace allows"
        )
        log.warning("cron job %s: %s", job_id, error)
        task = asyncio.get_running_loop().create_task(
            self.jobs.missed(job_id, error, self.scheduled_next(job_id))
        )
        self._bookkeeping.add(task)
        task.add_done_callback(self._bookkeeping.discard)
