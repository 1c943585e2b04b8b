"""One run of a job: an agent turn in the job's own session, its answer queued in the outbox.

- The run holds the lock of ``cron:<job id>`` (one run of a job at a time, across processes) and
  claims the job in the table before it starts (only an enabled, due job runs; see ``jobs``).
- The job's session is built once — the creator's memory scope, the target platform's prompt hint —
  and reused by every run, so from the second run on the prompt is read from the provider's cache.
  Hygiene compresses it when it grows, as it does for chats.
- The prompt is the user message; the ``cron`` tool is refused inside the run (no job makes jobs).
  Usage is recorded with purpose ``cron``, charged to the bot and the job (``budgets``; the job's
  ``per_run_usd`` counts in this run alone): a run whose next request would cross a limit stops before
  it and fails with the limit's line, delivered once per limit and window (every run over its per-run
  limit says so).
- The run acts for the job's maker: its tools are put to the maker's rights of the moment
  (``gateway.rights``), and a job whose maker lost access is paused instead of run, and is not
  delivered when the access went while it ran (``gateway.cron.standing``).
- The answer takes the normal delivery path: rendered and split for the target's capabilities and
  queued in the outbox, whose sender retries; which outbox items carry it is recorded with the job, so
  ``herald cron list`` shows whether it was sent, is pending or failed. An answer that is exactly
  ``[SILENT]`` is not delivered. A run that produced no answer is recorded as failed, and one line
  saying so is delivered to the target chat: a job that silently stops working is worse than a
  message about it.
- A job marked ``batch`` sends its run's requests through the provider's batch API (``agent.batching``:
  half price, the same prompt cache), each waiting until the run's deadline (the job's ``batch_deadline``,
  else ``agent.batch_deadline``) and then sent normally. The run's mark is stored with its claim, and its
  batch with that mark: a gateway that restarts (in a cluster, the next leader) resumes the run instead of
  recording it interrupted, finds the batch it submitted, polls it on and delivers its answer once
  (:meth:`CronRunner.resumable`, :meth:`CronRunner.resume`).
- A database that cannot be reached during a run is waited out (``gateway.intake.outage``, as a chat's turn
  is): the occurrence was claimed, so it is not lost but finished once the database is back. What the
  run did before is not done again: the claim, a queued answer; a turn cut off by the outage is looked
  for first (its stored answer is delivered, a half-done one is closed and run again). A gateway that
  stops meanwhile records the run as interrupted (at its next start, if the database is still away).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from agent.api import (
    Batching,
    CompressionOutcome,
    Lease,
    Refusal,
    Refuse,
    SessionRecord,
    SessionSpec,
    TurnResult,
    batching,
    both,
)
from agent.db import StorageUnavailable
from gateway.chats import job_session_key
from gateway.conversation.addressing import display_name
from gateway.conversation.context import TurnServices
from gateway.conversation.envelope import TurnRequest, run_turn
from gateway.conversation.turns import UNEXPECTED, turn_rights, with_notices
from gateway.cron.jobs import CronJob, CronJobs, RunStatus
from gateway.cron.standing import PausedJob, pause_if_lost, pause_lost
from gateway.delivery.replies import PlatformNotConnected, Replies
from gateway.intake.outage import until_reachable

log = logging.getLogger(__name__)

SILENT = "[SILENT]"
PURPOSE = "cron"
REFUSED = frozenset({"cron"})
RUN_META = "cron_job"
OCCURRENCE_META = "cron_run"  # one run's own mark: a resumed run finds its own turn, not an earlier run's
CONTEXT = (
    'This conversation is the scheduled job "{name}". Each user message is the job\'s prompt, sent by '
    "the scheduler when the job runs; your answer is posted to a chat whose people do not see the "
    f"prompt. When a run has nothing worth posting, answer exactly {SILENT}."
)


class DeliveryUnavailable(Exception):
    """The target's platform is not served by this gateway process, or the job's maker lost access."""


@dataclass
class _Run:
    """One occurrence of a job as it goes: what is done is not done again after a wait for the database."""

    job_id: str
    occurrence: str = field(default_factory=lambda: secrets.token_hex(8))
    job: CronJob | None = None  # claimed
    answered: bool = False  # text / error hold the turn's outcome
    text: str = ""
    notices: tuple[str, ...] = ()  # lines delivered after the answer (a fallback model gave it, cut off)
    error: str | None = None  # the sentence of a run that produced no answer
    refused: Refusal | None = None  # the spend limit that stopped the run (its line is ``error``)
    delivery: list[int] | None = None  # the outbox items queued for it
    resumed: bool = False  # claimed by a process that stopped: its turn is looked for first

    @property
    def meta(self) -> dict[str, Any]:
        """Stored with the run's prompt: which job, and which of its runs."""
        return {RUN_META: self.job_id, OCCURRENCE_META: self.occurrence}


class JobTurn:
    """A job's run as a channel of the turn's envelope (``gateway.conversation.envelope``): the job's
    prompt under its maker's rights with the ``cron`` tool refused, its requests batched when the job is
    marked so; the outcome kept on the run, which :meth:`CronRunner._record` delivers and records."""

    reviewed = False  # a job's run starts no background review

    def __init__(
        self, runner: CronRunner, lease: Lease, session: SessionRecord, run: _Run, job: CronJob
    ) -> None:
        self.runner = runner
        self.lease = lease
        self.session = session
        self.run = run
        self.job = job
        self.capped = not job.batch  # a batched run waits for its batch (``gateway.conversation.envelope``)

    @asynccontextmanager
    async def around(self) -> AsyncIterator[TurnRequest]:
        job, services = self.job, self.runner.services

        async def compressed(outcome: CompressionOutcome) -> None:
            log.info("cron job %s: %s", job.id, outcome.line())

        with batching(self.runner.batching_of(job, self.run)):
            yield TurnRequest(
                self.lease,
                self.session,
                job.prompt,
                what=f"cron job {job.id}",
                meta=self.run.meta,
                on_compressed=compressed,
                gate=both(turn_rights(services, job.creator, job.memory_scope), Refuse(REFUSED)),
                purpose=PURPOSE,
            )

    async def ending(self, result: TurnResult) -> None:
        return None

    async def lost_access(self) -> bool:
        """The maker lost access during the run: the job is paused and the run not delivered."""
        paused = await pause_if_lost(self.runner.jobs, self.job, self.runner.services.authorizer)
        if paused is None:
            return False
        run = self.run
        run.answered, run.error, run.delivery = True, f"not delivered: {paused.line()}", []
        return True

    async def refused(self, refusal: Refusal) -> None:
        run = self.run
        run.answered, run.error, run.refused = True, self.runner.services.budgets.line(refusal), refusal

    async def failed(self, result: TurnResult) -> None:
        run = self.run
        run.answered, run.text, run.notices, run.error = True, result.text, result.notices, result.error

    async def answered(self, result: TurnResult) -> None:
        run = self.run
        run.answered, run.text, run.notices = True, result.text, result.notices


class CronServices(TurnServices, Protocol):
    """What a job's run reads of the gateway besides a turn's (``gateway.wiring`` hands it in): the reply
    road into the target chat, and how the model should write on the target's platform."""

    @property
    def replies(self) -> Replies: ...

    def prompt_hint(self, platform: str) -> str:
        """How the model should write on ``platform``."""


class CronRunner:
    def __init__(self, services: CronServices, jobs: CronJobs) -> None:
        self.services = services
        self.jobs = jobs
        self._active: set[str] = set()  # jobs running in this process

    async def run(self, job_id: str, *, next_run_at: float | None, due_only: bool = True) -> RunStatus | None:
        """Run ``job_id`` once if it may run now; returns how the run ended (None: not run).

        ``next_run_at`` is the job's following run time (from the scheduler). ``due_only`` False runs
        an enabled job whatever its next run time says (an operator's or a test's direct run).
        """
        return await self._go(_Run(job_id), next_run_at=next_run_at, due_only=due_only)

    async def resumable(self) -> list[CronJob]:
        """At start-up: the jobs whose claimed run was waiting for a batch when its process stopped."""
        waiting = await self.services.runtime.store.batches.waiting_runs(job_session_key(""))
        jobs = await self.jobs.all()
        return [
            job
            for job in jobs
            if job.last_status in (RunStatus.RUNNING, RunStatus.INTERRUPTED)  # a crash, or a shutdown
            and job.occurrence is not None
            and job.run_key(job.occurrence) in waiting
        ]

    async def resume(self, job: CronJob) -> RunStatus | None:
        """Go on with ``job``'s claimed run (found by :meth:`resumable`): its turn is run again on the
        same history, so its request finds the batch it submitted; the answer is delivered once."""
        assert job.occurrence is not None
        log.info("cron job %s: resuming its run, which waits for a batch", job.id)
        run = _Run(job.id, occurrence=job.occurrence, job=job, resumed=True)
        return await self._go(run, next_run_at=job.next_run_at, due_only=False)

    async def _go(self, run: _Run, *, next_run_at: float | None, due_only: bool) -> RunStatus | None:
        job_id = run.job_id
        if job_id in self._active:
            log.info("cron job %s is already running; this occurrence is skipped", job_id)
            return None
        self._active.add(job_id)
        try:
            attempt = partial(self._attempt, run, next_run_at=next_run_at, due_only=due_only)
            return await until_reachable(attempt, f"cron job {job_id}")
        except asyncio.CancelledError:
            if run.job is not None:
                await asyncio.shield(self._interrupted(job_id))
            raise
        finally:
            self._active.discard(job_id)

    async def _attempt(
        self, run: _Run, again: bool, *, next_run_at: float | None, due_only: bool
    ) -> RunStatus | None:
        """One try at ``run``, from where the last one (cut off by the database) stopped."""
        async with self.services.runtime.locks.hold(job_session_key(run.job_id)) as lease:
            if run.job is None:
                if await self._maker_lost_access(run.job_id):
                    return None
                run.job = await self.jobs.claim(
                    run.job_id, next_run_at, due_only=due_only, occurrence=run.occurrence
                )
                if run.job is None:
                    return None
            elif run.resumed and not run.answered and not await self._still_waiting(run):
                return None  # another process (a leader before this one) finished it meanwhile
            try:
                if not run.answered:
                    await self._turn(lease, run, run.job, resumed=again or run.resumed)
                return await self._record(run, run.job)
            except StorageUnavailable:
                raise  # waited out: the next try goes on from here
            except Exception:
                log.exception("cron job %s: the run failed unexpectedly", run.job_id)
                if run.delivery is not None:  # its answer (or failure line) is queued: say nothing more
                    return RunStatus.FAILED
                run.answered, run.error = True, UNEXPECTED
                return await self._failed(run, run.job)

    async def _turn(self, lease: Lease, run: _Run, job: CronJob, *, resumed: bool) -> None:
        runtime = self.services.runtime
        session = await self._session(lease, job)  # hygiene and run_turn close a run cut off by a crash
        earlier = await runtime.agent.earlier_attempt(lease, session, run.meta) if resumed else None
        if earlier is not None:  # answered before the database went away: delivered as it is
            run.answered, run.text = True, earlier
            return
        creator = job.creator
        is_admin = creator is None or self.services.authorizer.is_admin(creator.platform, creator.user_id)
        guest = None if is_admin or creator is None else creator.person
        charge = self.services.budgets.for_run(job.id, run.occurrence, guest)
        await run_turn(self.services, JobTurn(self, lease, session, run, job), charge)

    async def _still_waiting(self, run: _Run) -> bool:
        """Whether the resumed run is still the job's unfinished run (checked under the job's lock)."""
        job = await self.jobs.get(run.job_id)
        unfinished = (RunStatus.RUNNING, RunStatus.INTERRUPTED)
        return job is not None and job.occurrence == run.occurrence and job.last_status in unfinished

    def batching_of(self, job: CronJob, run: _Run) -> Batching | None:
        """How the run's requests go through the batch API (None: the job is not marked ``batch``)."""
        if not job.batch:
            return None
        runtime = self.services.runtime
        seconds = job.batch_deadline or runtime.config.agent.batch_deadline
        return Batching(deadline=runtime.agent.clock() + seconds, run=job.run_key(run.occurrence))

    async def pause_lost(self) -> list[PausedJob]:
        """Pause the jobs whose makers lost access (at start-up: the configuration may have changed)."""
        return await pause_lost(self.jobs, self.services.authorizer)

    async def _maker_lost_access(self, job_id: str) -> bool:
        """Whether the job's maker lost access (the job is then paused, and not run)."""
        job = await self.jobs.get(job_id)
        if job is None or not job.enabled:
            return False  # the claim finds nothing to run
        return await pause_if_lost(self.jobs, job, self.services.authorizer) is not None

    async def _record(self, run: _Run, job: CronJob) -> RunStatus:
        """Deliver the outcome (once) and record how the run ended."""
        if run.error is not None:
            return await self._failed(run, job)
        if run.text.strip() == SILENT:
            await self.jobs.finish(job.id, RunStatus.SILENT, output=run.text)
            return RunStatus.SILENT
        if run.delivery is None:
            try:
                run.delivery = await self._deliver(job, with_notices(run.text, run.notices))
            except DeliveryUnavailable as error:
                await self.jobs.finish(job.id, RunStatus.FAILED, output=run.text, error=str(error))
                return RunStatus.FAILED
        await self.jobs.finish(job.id, RunStatus.OK, output=run.text, delivery=run.delivery)
        return RunStatus.OK

    async def _interrupted(self, job_id: str) -> None:
        try:
            await self.jobs.finish(job_id, RunStatus.INTERRUPTED, error="the gateway stopped during the run")
        except StorageUnavailable as error:  # the next start records it (jobs.interrupted_runs)
            log.warning("cron job %s: stopped during the run, recorded at the next start: %s", job_id, error)

    async def _session(self, lease: Lease, job: CronJob) -> SessionRecord:
        """The job's session: built on its first run, then the same one (and the same prompt bytes)."""
        lease.check(job.session_key)
        store = self.services.runtime.store
        existing = await store.sessions.get(job.session_id) if job.session_id else None
        if existing is None:
            existing = await store.sessions.latest(job.session_key)
        if existing is not None:
            return existing
        target = job.target
        started = await self.services.runtime.new_session(
            SessionSpec(
                session_key=job.session_key,
                source="cron",
                platform=target.platform,
                memory_scope=job.memory_scope,
                chat_id=target.chat_id,
                chat_context=CONTEXT.format(name=display_name(job.name)),
                platform_hint=self.services.prompt_hint(target.platform),
            )
        )
        for warning in started.warnings:
            log.warning("cron job %s session %s: %s", job.id, started.record.id, warning)
        await self.jobs.set_session(job.id, started.record.id)
        return started.record

    async def _deliver(self, job: CronJob, text: str) -> list[int]:
        """Queue ``text`` for the job's target; returns the outbox ids that carry it. Nothing is queued
        (and the job is paused) when its maker lost access, also while this run went on."""
        paused = await pause_if_lost(self.jobs, job, self.services.authorizer)
        if paused is not None:
            raise DeliveryUnavailable(f"not delivered: {paused.line()}")
        try:
            return await self.services.replies.post(job.target, text)
        except PlatformNotConnected as error:
            raise DeliveryUnavailable(str(error)) from None

    async def _failed(self, run: _Run, job: CronJob) -> RunStatus:
        """Record the failure and tell the target chat in one line."""
        assert run.error is not None
        if run.delivery is None and run.refused is not None:
            told = await self.services.budgets.should_tell(run.refused, job.session_key)
            if not told:  # the target chat heard of this limit used up in this window already: say it once
                run.delivery = []
        if run.delivery is None:
            line = f'⚠️ Scheduled job "{display_name(job.name)}" ({job.id}) failed: {run.error}'
            try:
                run.delivery = await self._deliver(job, line)
            except DeliveryUnavailable as error:
                run.error, run.delivery = f"{run.error} (and {error})", []
        await self.jobs.finish(job.id, RunStatus.FAILED, error=run.error, delivery=run.delivery)
        return RunStatus.FAILED
