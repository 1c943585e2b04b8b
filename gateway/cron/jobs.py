"""The ``cron_jobs`` table: every scheduled job, its state and the outcome of its last run.

The table is the one source of truth. The scheduler of ``herald gateway run`` follows it (jobs
changed by ``herald cron`` in another process included), and a run *claims* its job here before it
starts: only a job that is enabled and due is run, and the claim moves its next run time on in the
same transaction, so two schedulers (or a scheduled run and a "run now") never both run one occurrence.

The outcome of the last run records which outbox items carry its answer; the delivery state shown
(sent, pending, failed) is read from the outbox itself, so a failed delivery is never shown as sent.

Contract:

- :meth:`CronJobs.claim` is the one read-then-write here, and it is exclusive: the job's row is read
  ``FOR UPDATE`` (PostgreSQL; on SQLite the write transaction already runs alone), so of two claims of
  one occurrence, in one process or several, the second waits for the first and then finds the job not
  due. It waits rather than skipping a locked row: a row locked for a moment by bookkeeping
  (``finish``, ``set_session``) must not cost an occurrence. A claim that raised claimed nothing.
- :meth:`CronJobs.add` decides from counts (the jobs of the target chat, and of their maker) inside
  the transaction that inserts, serialized with every other ``add`` (a lock on PostgreSQL; SQLite's
  writer runs alone), so two jobs made at once never both slip under a cap.
- Every other change is a single statement. ``add`` picks an unused id in the same statement that
  inserts it (a clash is retried with another id); the setters are idempotent; ``finish`` and
  ``missed`` record the last outcome (the last call wins).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from adapters.base import ChatAddress
from adapters.registry import EXAMPLE
from agent.db import Storage, insert_ignoring_duplicates, serialize
from gateway.access.auth import Speaker
from gateway.chats import job_session_key, parse_chat
from gateway.ledger.outbox import OutboxState, item_states
from gateway.tables import cron_jobs

ID_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"  # no 0/o, 1/l/i look-alikes
ID_LENGTH = 6
CLAIM_LEEWAY = 1.0  # seconds: a run may start this early and still count as due
MAX_OUTPUT_CHARS = 4000  # of the last answer kept for `herald cron list`


class RunStatus(StrEnum):
    RUNNING = "running"
    OK = "ok"  # answered; the answer is queued for delivery (its delivery state is the outbox's)
    SILENT = "silent"  # answered [SILENT]: nothing delivered, on purpose
    FAILED = "failed"  # no answer (the error line is queued for delivery)
    MISSED = "missed"  # the scheduler skipped a run that was later than scheduler.misfire_grace
    INTERRUPTED = "interrupted"  # the gateway stopped while it ran


class DeliveryState(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


def new_job_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def parse_target(text: str) -> ChatAddress:
    """A job's target as a person writes it (``gateway.chats.parse_chat``)."""
    return parse_chat(text, example=EXAMPLE)


@dataclass(frozen=True)
class NewJob:
    name: str
    prompt: str
    schedule: str  # canonical text (gateway.cron.schedule)
    target: ChatAddress
    origin_key: str  # the session key of the chat it was created in ("cli:dm:local" for the command line)
    memory_scope: str  # whose memory its runs read and write: the creator's
    repeat: int | None  # runs left; None = until removed
    next_run_at: float | None
    creator: Speaker | None = None  # who made it, where; None: the command line or the terminal
    batch: bool = False  # its runs' requests go through the provider's batch API, at half price
    batch_deadline: float | None = None  # seconds a run may wait for its batch; None: agent.batch_deadline


@dataclass(frozen=True)
class JobCounts:
    """What a new job would join: the jobs posting into its chat, and those its maker made."""

    in_chat: int
    by_creator: int


class JobRefused(Exception):
    """A job that may not be added; the message is one sentence saying why."""


@dataclass(frozen=True)
class CronJob:
    id: str
    name: str
    prompt: str
    schedule: str
    target: ChatAddress
    origin_key: str
    memory_scope: str
    enabled: bool
    repeat: int | None
    next_run_at: float | None
    last_run_at: float | None
    last_status: RunStatus | None
    last_output: str | None
    last_error: str | None
    last_delivery: tuple[int, ...]
    session_id: str | None
    version: int
    created_at: float
    delivery: DeliveryState | None = None  # of the last run's answer, read from the outbox
    delivery_error: str | None = None
    creator: Speaker | None = None  # who made it, where; None: the command line, the terminal, older jobs
    batch: bool = False  # its runs' requests go through the provider's batch API, at half price
    batch_deadline: float | None = None  # seconds a run may wait for its batch; None: agent.batch_deadline
    occurrence: str | None = None  # the mark of the run claimed last (a restart resumes it by this mark)

    @property
    def session_key(self) -> str:
        return job_session_key(self.id)

    def run_key(self, occurrence: str) -> str:
        """What names one of its runs beyond its process (a batch it waits for is stored under it)."""
        return f"{self.session_key}:{occurrence}"


Listener = Callable[[], None]


class CronJobs:
    """The table. Changes made in this process are announced to ``subscribe``d listeners (the
    scheduler), so they apply at once; another process's changes are found by polling ``versions``."""

    def __init__(self, storage: Storage, *, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every change; returns the function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    # -- reading --------------------------------------------------------------------------------

    async def get(self, job_id: str) -> CronJob | None:
        query = sa.select(cron_jobs).where(cron_jobs.c.id == job_id.lower())

        def select(conn: sa.Connection) -> CronJob | None:
            jobs = _jobs(conn, query)
            return jobs[0] if jobs else None

        return await self.storage.read(select)

    async def all(self) -> list[CronJob]:
        query = sa.select(cron_jobs).order_by(cron_jobs.c.created_at)
        return await self.storage.read(lambda conn: _jobs(conn, query))

    async def for_chat(self, target: ChatAddress) -> list[CronJob]:
        """Jobs that post into ``target`` (a chat, or one topic of it)."""
        query = (
            sa.select(cron_jobs)
            .where(
                cron_jobs.c.platform == target.platform,
                cron_jobs.c.chat_id == target.chat_id,
                cron_jobs.c.thread_id.is_not_distinct_from(target.thread_id),
            )
            .order_by(cron_jobs.c.created_at)
        )
        return await self.storage.read(lambda conn: _jobs(conn, query))

    # -- changes someone makes (each bumps the version) -----------------------------------------

    async def for_creator(self, person: str) -> list[CronJob]:
        """Jobs made by ``person`` (``platform:user_id``)."""
        query = sa.select(cron_jobs).where(cron_jobs.c.created_by == person).order_by(cron_jobs.c.created_at)
        return await self.storage.read(lambda conn: _jobs(conn, query))

    async def add(self, new: NewJob, refuse: Callable[[JobCounts], str | None] | None = None) -> CronJob:
        """Insert ``new``; ``refuse`` (given the counts it would join, read in the same transaction) may
        say why it must not be added: then :class:`JobRefused` is raised and nothing is written."""

        def insert(conn: sa.Connection) -> str:
            if refuse is not None:
                serialize(conn, "cron_jobs:add")
                reason = refuse(_counts(conn, new))
                if reason is not None:
                    raise JobRefused(reason)
            now = self.clock()
            values = {
                "name": new.name,
                "prompt": new.prompt,
                "schedule": new.schedule,
                "platform": new.target.platform,
                "chat_id": new.target.chat_id,
                "thread_id": new.target.thread_id,
                "origin_key": new.origin_key,
                "memory_scope": new.memory_scope,
                "repeat": new.repeat,
                "next_run_at": new.next_run_at,
                "created_at": now,
                "updated_at": now,
                "created_by": new.creator.person if new.creator else None,
                "creator": new.creator.to_json() if new.creator else None,
                "batch": new.batch,
                "batch_deadline": new.batch_deadline,
            }
            while True:  # a clash with an existing id (one in a billion) draws again
                job_id = new_job_id()
                if insert_ignoring_duplicates(conn, cron_jobs, {"id": job_id, **values}):
                    return job_id

        job_id = await self.storage.write(insert)
        self._changed()
        job = await self.get(job_id)
        assert job is not None
        return job

    async def set_enabled(self, job_id: str, enabled: bool, next_run_at: float | None) -> None:
        await self._update(job_id, enabled=enabled, next_run_at=next_run_at)

    async def mark_due(self, job_id: str) -> None:
        """Due now: the scheduler runs it within seconds (also from another process)."""
        await self._update(job_id, next_run_at=self.clock())

    async def remove(self, job_id: str) -> None:
        statement = sa.delete(cron_jobs).where(cron_jobs.c.id == job_id)
        await self.storage.write(lambda conn: conn.execute(statement))
        self._changed()

    async def _update(self, job_id: str, **values: Any) -> None:
        statement = (
            sa.update(cron_jobs)
            .where(cron_jobs.c.id == job_id)
            .values(**values, version=cron_jobs.c.version + 1, updated_at=self.clock())
        )
        await self.storage.write(lambda conn: conn.execute(statement))
        self._changed()

    # -- a run's bookkeeping (no version change: the scheduler already knows) -------------------

    async def claim(
        self, job_id: str, next_run_at: float | None, *, due_only: bool = True, occurrence: str | None = None
    ) -> CronJob | None:
        """Start a run: None unless the job is enabled and due (``due_only``); otherwise count the run
        against ``repeat``, move the next run time to ``next_run_at`` and mark the job running (the run's
        own mark, ``occurrence``, kept with it).

        A job whose runs are used up (or that has no next time) is disabled in the same transaction.
        """

        def take(conn: sa.Connection) -> bool:
            now = self.clock()
            row = conn.execute(
                sa.select(cron_jobs.c.enabled, cron_jobs.c.next_run_at, cron_jobs.c.repeat)
                .where(cron_jobs.c.id == job_id)
                .with_for_update()
            ).first()
            if row is None or not row.enabled:
                return False
            if due_only and (row.next_run_at is None or row.next_run_at > now + CLAIM_LEEWAY):
                return False  # not due: another run (another process, a coalesced fire) took it
            left = None if row.repeat is None else max(0, row.repeat - 1)
            finished = left == 0 or next_run_at is None
            conn.execute(
                sa.update(cron_jobs)
                .where(cron_jobs.c.id == job_id)
                .values(
                    repeat=left,
                    enabled=not finished,
                    next_run_at=None if finished else next_run_at,
                    last_run_at=now,
                    last_status=RunStatus.RUNNING.value,
                    last_error=None,
                    occurrence=occurrence,
                    version=cron_jobs.c.version + int(finished),
                    updated_at=now,
                )
            )
            return True

        if not await self.storage.write(take):
            return None
        job = await self.get(job_id)
        if job is not None and not job.enabled:
            self._changed()  # the scheduler drops it
        return job

    async def set_session(self, job_id: str, session_id: str) -> None:
        statement = sa.update(cron_jobs).where(cron_jobs.c.id == job_id).values(session_id=session_id)
        await self.storage.write(lambda conn: conn.execute(statement))

    async def finish(
        self,
        job_id: str,
        status: RunStatus,
        *,
        output: str | None = None,
        error: str | None = None,
        delivery: Sequence[int] = (),
    ) -> None:
        """Record how the run that ``claim`` started ended."""
        statement = (
            sa.update(cron_jobs)
            .where(cron_jobs.c.id == job_id)
            .values(
                last_status=status.value,
                last_output=output[:MAX_OUTPUT_CHARS] if output is not None else None,
                last_error=error,
                last_delivery=json.dumps(list(delivery)),
                updated_at=self.clock(),
            )
        )
        await self.storage.write(lambda conn: conn.execute(statement))

    async def missed(self, job_id: str, error: str, next_run_at: float | None) -> None:
        """The scheduler skipped a run that was too late; a one-shot that missed its time is done."""
        finished = next_run_at is None
        values: dict[str, Any] = {
            "last_status": RunStatus.MISSED.value,
            "last_error": error,
            "next_run_at": next_run_at,
            "updated_at": self.clock(),
        }
        if finished:
            values.update(enabled=False, version=cron_jobs.c.version + 1)
        statement = sa.update(cron_jobs).where(cron_jobs.c.id == job_id).values(**values)
        await self.storage.write(lambda conn: conn.execute(statement))

    async def interrupted_runs(self, resumed: Sequence[str] = ()) -> int:
        """At start-up: runs a stopped or crashed process left marked running, but those of the jobs
        ``resumed`` (waiting for a batch: they go on); returns how many."""
        statement = (
            sa.update(cron_jobs)
            .where(cron_jobs.c.last_status == RunStatus.RUNNING.value, cron_jobs.c.id.not_in(list(resumed)))
            .values(last_status=RunStatus.INTERRUPTED.value, last_error="the gateway stopped during the run")
        )
        return await self.storage.write(lambda conn: int(conn.execute(statement).rowcount or 0))


def _counts(conn: sa.Connection, new: NewJob) -> JobCounts:
    target = new.target
    count = sa.select(sa.func.count()).select_from(cron_jobs)
    in_chat = count.where(cron_jobs.c.platform == target.platform, cron_jobs.c.chat_id == target.chat_id)
    by_creator = 0
    if new.creator is not None:
        by_creator = conn.execute(count.where(cron_jobs.c.created_by == new.creator.person)).scalar_one()
    return JobCounts(in_chat=conn.execute(in_chat).scalar_one(), by_creator=by_creator)


def _jobs(conn: sa.Connection, query: sa.Select[Any]) -> list[CronJob]:
    """The jobs ``query`` selects, each with the delivery state of its last run read from the outbox
    (one more query for all of them)."""
    jobs = [_job(row) for row in conn.execute(query)]
    states = item_states(conn, [item for job in jobs for item in job.last_delivery])
    return [_with_delivery(job, states) for job in jobs]


def _with_delivery(job: CronJob, states: dict[int, tuple[OutboxState, str | None]]) -> CronJob:
    """The last delivery's state, from the outbox items it names: failed wins over pending over sent;
    its error is the newest item's that has one."""
    found = [states[item] for item in sorted(job.last_delivery) if item in states]
    if not found:
        return job
    kinds = {state for state, _ in found}
    delivery = next(
        DeliveryState(state.value)
        for state in (OutboxState.FAILED, OutboxState.PENDING, OutboxState.SENT)
        if state in kinds
    )
    errors = [error for _, error in found if error is not None]
    return replace(job, delivery=delivery, delivery_error=errors[-1] if errors else None)


def _job(row: sa.Row[Any]) -> CronJob:
    return CronJob(
        id=row.id,
        name=row.name,
        prompt=row.prompt,
        schedule=row.schedule,
        target=ChatAddress(row.platform, row.chat_id, row.thread_id),
        origin_key=row.origin_key,
        memory_scope=row.memory_scope,
        enabled=bool(row.enabled),
        repeat=row.repeat,
        next_run_at=row.next_run_at,
        last_run_at=row.last_run_at,
        last_status=RunStatus(row.last_status) if row.last_status else None,
        last_output=row.last_output,
        last_error=row.last_error,
        last_delivery=tuple(json.loads(row.last_delivery)),
        session_id=row.session_id,
        version=row.version,
        created_at=row.created_at,
        creator=Speaker.from_json(row.creator) if row.creator else None,
        batch=bool(row.batch),
        batch_deadline=row.batch_deadline,
        occurrence=row.occurrence,
    )
