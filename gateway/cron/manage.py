"""Creating and changing jobs, and who may: the rules the ``cron`` tool, ``/cron`` and ``herald cron`` share.

- The owner (a session whose memory scope is the owner's: the terminal, the command line, an admin's
  direct chat) may post into any chat and manage every job.
- Anyone else works in their own chat only: a job they create posts into the chat it was created in,
  and they see and change only the jobs that post there.
- A job's runs use its creator's memory scope: a job made in a group reads and writes the group's memory.
- The terminal and the command line have no chat to post into: a target must be given there.
- Limits for everyone but the owner and admins (``scheduler`` in config, :class:`JobLimits`): at most
  ``max_jobs_per_chat`` jobs post into one chat, one person makes at most ``max_jobs_per_person``, and a
  repeating job runs at most once every ``guest_min_interval`` seconds. A guest's job costs the owner a
  model request per run: a person of no ill will never meets these.
- A job records who made it and where (:class:`gateway.access.auth.Speaker`): its runs act with that person's
  rights of the moment (``gateway.cron.standing``).

Every refusal is a :class:`CronError` with one sentence for the person (or the model) that asked.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from adapters.base import ChatAddress
from adapters.registry import EXAMPLE
from agent.memory import OWNER_SCOPE
from gateway.access.auth import Speaker
from gateway.chats import TERMINAL_SESSION_KEY
from gateway.config import SchedulerSettings
from gateway.cron.describe import describe
from gateway.cron.jobs import CronJob, CronJobs, JobCounts, JobRefused, NewJob, parse_target
from gateway.cron.schedule import (
    Schedule,
    ScheduleError,
    check_future,
    format_gap,
    parse_schedule,
    shortest_gap,
)

MAX_NAME_CHARS = 60
MAX_PROMPT_CHARS = 8000
BATCH_DEADLINES = (60.0, 86_400.0)  # seconds a batch run may wait: a minute to the providers' 24 hours


class CronError(Exception):
    """A request about jobs that cannot be done; the message is one sentence saying why."""


@dataclass(frozen=True)
class Caller:
    """Who asks: their chat's session key, memory scope, and chat (None: terminal or command line);
    in a chat, the person who asks (``creator``) and whether they are one of the bot's admins."""

    session_key: str
    memory_scope: str
    chat: ChatAddress | None
    creator: Speaker | None = None
    admin: bool = False

    @property
    def owner(self) -> bool:
        return self.memory_scope == OWNER_SCOPE

    @property
    def limited(self) -> bool:
        """Whether :class:`JobLimits` apply: to everyone but the owner and admins."""
        return not (self.owner or self.admin)


@dataclass(frozen=True)
class JobLimits:
    """``scheduler.max_jobs_per_chat``, ``max_jobs_per_person`` and ``guest_min_interval`` (seconds)."""

    per_chat: int = 10
    per_person: int = 10
    min_interval: float = 900.0

    @classmethod
    def of(cls, settings: SchedulerSettings) -> JobLimits:
        return cls(settings.max_jobs_per_chat, settings.max_jobs_per_person, settings.guest_min_interval)


def interval_refusal(gap: dt.timedelta | None, schedule: str, limits: JobLimits) -> str | None:
    """Why a guest's job whose runs are ``gap`` apart may not be made (None: it may)."""
    least = dt.timedelta(seconds=limits.min_interval)
    if gap is None or gap >= least:
        return None
    return (
        f"Jobs made by guests may run at most once every {format_gap(least)}, and '{schedule}' runs "
        f"every {format_gap(gap)}: choose a longer interval."
    )


def count_refusal(counts: JobCounts, limits: JobLimits) -> str | None:
    """Why one more job may not join ``counts`` (None: it may)."""
    if counts.by_creator >= limits.per_person:
        return (
            f"You already have {counts.by_creator} scheduled jobs, the most one person may have: remove "
            "one before adding another."
        )
    if counts.in_chat >= limits.per_chat:
        return (
            f"This chat already has {counts.in_chat} scheduled jobs, the most one chat may have: remove "
            "one before adding another."
        )
    return None


COMMAND_LINE = Caller(session_key=TERMINAL_SESSION_KEY, memory_scope=OWNER_SCOPE, chat=None)


def default_name(prompt: str) -> str:
    line = " ".join(prompt.split())
    return line if len(line) <= MAX_NAME_CHARS else line[: MAX_NAME_CHARS - 1].rstrip() + "…"


class CronManager:
    """Job management on top of the table, in the scheduler's time zone."""

    def __init__(
        self,
        jobs: CronJobs,
        timezone: dt.tzinfo,
        limits: JobLimits | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobs = jobs
        self.timezone = timezone
        self.limits = limits or JobLimits()
        self.clock = clock

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock(), self.timezone)

    def parse(self, text: str) -> Schedule:
        """A stored or typed schedule; raises CronError with the allowed forms."""
        try:
            return parse_schedule(text, self.timezone, self.now())
        except ScheduleError as error:
            raise CronError(str(error)) from None

    async def create(
        self,
        caller: Caller,
        *,
        prompt: str,
        schedule: str,
        name: str | None = None,
        target: str | None = None,
        repeat: int | None = None,
        batch: bool = False,
        batch_deadline: float | None = None,
    ) -> CronJob:
        """A new job; ``batch``: its runs go through the provider's batch API (half price, answered
        within ``batch_deadline`` seconds, default ``agent.batch_deadline``)."""
        prompt = prompt.strip()
        if not prompt:
            raise CronError("A job needs a prompt: what should be done when it runs.")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise CronError(
                f"The prompt is too long ({len(prompt):,} characters; at most {MAX_PROMPT_CHARS:,})."
            )
        parsed = self.parse(schedule)
        now = self.now()
        try:
            check_future(parsed, now)
        except ScheduleError as error:
            raise CronError(str(error)) from None
        if repeat is not None and repeat < 1:
            raise CronError("repeat is the number of runs: 1 or more (leave it out to repeat until removed).")
        if batch_deadline is not None:
            low, high = BATCH_DEADLINES
            if not batch:
                raise CronError("batch_deadline applies to a batch job: add batch: true, or leave it out.")
            if not low <= batch_deadline <= high:
                raise CronError(
                    f"batch_deadline is the seconds a run may wait for its batch: {low:g} to {high:g} "
                    f"(24 hours), not {batch_deadline:g}."
                )
        limits = self.limits
        if caller.limited:
            refused = interval_refusal(shortest_gap(parsed, self.timezone, now), parsed.text, limits)
            if refused is not None:
                raise CronError(refused)
        first = parsed.first_run(self.timezone, now)
        new = NewJob(
            name=(name or "").strip()[:MAX_NAME_CHARS] or default_name(prompt),
            prompt=prompt,
            schedule=parsed.text,
            target=self._target(caller, target),
            origin_key=caller.session_key,
            memory_scope=caller.memory_scope,
            repeat=repeat if parsed.repeats else 1,
            next_run_at=first.timestamp() if first else None,
            creator=caller.creator if caller.chat is not None else None,
            batch=batch,
            batch_deadline=batch_deadline,
        )
        try:
            return await self.jobs.add(new, partial(count_refusal, limits=limits) if caller.limited else None)
        except JobRefused as refusal:
            raise CronError(str(refusal)) from None

    def _target(self, caller: Caller, text: str | None) -> ChatAddress:
        if text is None or not text.strip():
            if caller.chat is None:
                raise CronError(f"There is no chat here to post into: give a target such as {EXAMPLE}:12345.")
            return caller.chat
        try:
            target = parse_target(text)
        except ValueError as error:
            raise CronError(str(error) + ".") from None
        if not caller.owner and target != caller.chat:
            raise CronError("A job can only post into this chat (only the owner may choose another chat).")
        return target

    async def visible(self, caller: Caller) -> list[CronJob]:
        """The owner sees every job; anyone else the jobs that post into their chat."""
        if caller.owner:
            return await self.jobs.all()
        return await self.jobs.for_chat(caller.chat) if caller.chat else []

    async def find(self, caller: Caller, job_id: str) -> CronJob:
        job = await self.jobs.get(job_id.strip())
        if job is None or not (caller.owner or job.target == caller.chat):
            where = "" if caller.owner else " in this chat"
            raise CronError(f"There is no job '{job_id.strip()}'{where}; list the jobs to see their ids.")
        return job

    async def pause(self, caller: Caller, job_id: str) -> CronJob:
        job = await self.find(caller, job_id)
        await self.jobs.set_enabled(job.id, False, job.next_run_at)
        return await self._reloaded(job)

    async def resume(self, caller: Caller, job_id: str) -> CronJob:
        """Runs missed while paused are not made up for: the next run is the next time from now."""
        job = await self.find(caller, job_id)
        if job.enabled:
            return job
        if job.repeat == 0:
            raise CronError(f"Job {job.id} has used up its runs; create a new one.")
        first = self.parse(job.schedule).first_run(self.timezone, self.now())
        await self.jobs.set_enabled(job.id, True, first.timestamp() if first else None)
        return await self._reloaded(job)

    async def run_now(self, caller: Caller, job_id: str) -> CronJob:
        job = await self.find(caller, job_id)
        if not job.enabled:
            raise CronError(f"Job {job.id} is paused or finished; resume it first.")
        await self.jobs.mark_due(job.id)
        return await self._reloaded(job)

    async def remove(self, caller: Caller, job_id: str) -> CronJob:
        job = await self.find(caller, job_id)
        await self.jobs.remove(job.id)
        return job

    async def _reloaded(self, job: CronJob) -> CronJob:
        return await self.jobs.get(job.id) or job


__all__ = ["COMMAND_LINE", "Caller", "CronError", "CronManager"]


Change = Literal["pause", "resume", "run", "remove"]
CHANGES: tuple[Change, ...] = ("pause", "resume", "run", "remove")


async def change_job(manager: CronManager, caller: Caller, change: Change, job_id: str) -> str:
    """Pause, resume, run now or remove one job; returns what to tell the caller. Raises CronError."""
    if change == "remove":
        removed = await manager.remove(caller, job_id)
        return f'Removed job {removed.id} "{removed.name}".'
    act = {"pause": manager.pause, "resume": manager.resume, "run": manager.run_now}[change]
    job = await act(caller, job_id)
    done = {"pause": "Paused", "resume": "Resumed", "run": "Running now"}[change]
    return f"{done}:\n{describe(job, manager.timezone)}"
