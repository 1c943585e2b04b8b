"""The ``cron_jobs`` table: every scheduled job, its state and the outcome of its last run.

The table is the one source of truth. The scheduler of ``herald gateway run`` follows it (jobs
changed by ``herald cron`` in another process included), and a run *claims* its job here before it
starts: only a job that is enabled and due is run, and the claim moves its next run time on in the
same transaction, so two schedulers (or a scheduled run and a "run now") never both run one occurrence.

The outcome of the last run records which outbox items carry its answer; the delivery state shown
(sent, pending, failed) is read from the outbox itself, so a failed delivery is never shown as sent.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from adapters.base import ChatAddress
from agent.db import Database

ID_ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"  # no 0/o, 1/l/i look-alikes
ID_LENGTH = 6
CLAIM_SLACK = 1.0  # seconds: a run may start this early and still count as due
MAX_OUTPUT_CHARS = 4000  # of the last answer kept for `herald cron list`
SESSION_PREFIX = "cron:"


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


def job_session_key(job_id: str) -> str:
    """The session key of a job's runs (its own conversation, and its lock)."""
    return f"{SESSION_PREFIX}{job_id}"


def new_job_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def parse_target(text: str) -> ChatAddress:
    """``platform:chat[:thread]`` (``telegram:-1001234:7``); raises ValueError with the expected form."""
    platform, _, rest = text.strip().partition(":")
    chat_id, _, thread_id = rest.partition(":")
    if not platform.isalpha() or not chat_id or ":" in thread_id or " " in rest:
        raise ValueError(
            f"'{text}' is not a chat: write platform:chat_id or platform:chat_id:thread_id "
            "(e.g. telegram:12345)"
        )
    return ChatAddress(platform.lower(), chat_id, thread_id or None)


def format_target(address: ChatAddress) -> str:
    base = f"{address.platform}:{address.chat_id}"
    return f"{base}:{address.thread_id}" if address.thread_id else base


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

    @property
    def session_key(self) -> str:
        return job_session_key(self.id)


Listener = Callable[[], None]

# The last delivery's state, from the outbox rows it names: failed wins over pending over sent.
SELECT_JOBS = """
SELECT j.*,
  (SELECT CASE WHEN SUM(o.state = 'failed') > 0 THEN 'failed'
               WHEN SUM(o.state = 'pending') > 0 THEN 'pending'
               WHEN COUNT(*) > 0 THEN 'sent' END
     FROM outbox o WHERE o.id IN (SELECT value FROM json_each(j.last_delivery))) AS delivery,
  (SELECT o.error FROM outbox o WHERE o.id IN (SELECT value FROM json_each(j.last_delivery))
     AND o.error IS NOT NULL ORDER BY o.id DESC LIMIT 1) AS delivery_error
FROM cron_jobs j
"""


class CronJobs:
    """The table. Changes made in this process are announced to ``subscribe``d listeners (the
    scheduler), so they apply at once; another process's changes are found by polling ``versions``."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
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
        def select(conn: sqlite3.Connection) -> CronJob | None:
            row = conn.execute(SELECT_JOBS + " WHERE j.id = ?", (job_id.lower(),)).fetchone()
            return _job(row) if row else None

        return await self.db.run(select)

    async def all(self) -> list[CronJob]:
        return await self.db.run(lambda conn: _jobs(conn.execute(SELECT_JOBS + " ORDER BY j.created_at")))

    async def for_chat(self, target: ChatAddress) -> list[CronJob]:
        """Jobs that post into ``target`` (a chat, or one topic of it)."""

        def select(conn: sqlite3.Connection) -> list[CronJob]:
            rows = conn.execute(
                SELECT_JOBS + " WHERE j.platform = ? AND j.chat_id = ? AND j.thread_id IS ? "
                "ORDER BY j.created_at",
                (target.platform, target.chat_id, target.thread_id),
            )
            return _jobs(rows)

        return await self.db.run(select)

    # -- changes someone makes (each bumps the version) -----------------------------------------

    async def add(self, new: NewJob) -> CronJob:
        def insert(conn: sqlite3.Connection) -> str:
            now = self.clock()
            while True:
                job_id = new_job_id()
                if conn.execute("SELECT 1 FROM cron_jobs WHERE id = ?", (job_id,)).fetchone() is None:
                    break
            conn.execute(
                """INSERT INTO cron_jobs (id, name, prompt, schedule, platform, chat_id, thread_id,
                   origin_key, memory_scope, repeat, next_run_at, created_at, updated_at)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                (
                    job_id, new.name, new.prompt, new.schedule, new.target.platform, new.target.chat_id,
                    new.target.thread_id, new.origin_key, new.memory_scope, new.repeat, new.next_run_at,
                    now, now,
                ),
            )  # fmt: skip
            return job_id

        job_id = await self.db.write(insert)
        self._changed()
        job = await self.get(job_id)
        assert job is not None
        return job

    async def set_enabled(self, job_id: str, enabled: bool, next_run_at: float | None) -> None:
        await self._update(job_id, "enabled = ?, next_run_at = ?", (int(enabled), next_run_at))

    async def mark_due(self, job_id: str) -> None:
        """Due now: the scheduler runs it within seconds (also from another process)."""
        await self._update(job_id, "next_run_at = ?", (self.clock(),))

    async def remove(self, job_id: str) -> None:
        await self.db.write(lambda conn: conn.execute("DELETE FROM cron_jobs WHERE id = ?", (job_id,)))
        self._changed()

    async def _update(self, job_id: str, assignments: str, values: Sequence[object]) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                f"UPDATE cron_jobs SET {assignments}, version = version + 1, updated_at = ? WHERE id = ?",
                (*values, self.clock(), job_id),
            )
        )
        self._changed()

    # -- a run's bookkeeping (no version change: the scheduler already knows) -------------------

    async def claim(self, job_id: str, next_run_at: float | None, *, due_only: bool = True) -> CronJob | None:
        """Start a run: None unless the job is enabled and due (``due_only``); otherwise count the run
        against ``repeat``, move the next run time to ``next_run_at`` and mark the job running.

        A job whose runs are used up (or that has no next time) is disabled in the same transaction.
        """

        def take(conn: sqlite3.Connection) -> bool:
            now = self.clock()
            row = conn.execute(
                "SELECT enabled, next_run_at, repeat FROM cron_jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None or not row["enabled"]:
                return False
            if due_only and (row["next_run_at"] is None or row["next_run_at"] > now + CLAIM_SLACK):
                return False  # not due: another run (another process, a coalesced fire) took it
            left = None if row["repeat"] is None else max(0, row["repeat"] - 1)
            finished = left == 0 or next_run_at is None
            conn.execute(
                """UPDATE cron_jobs SET repeat = ?, enabled = ?, next_run_at = ?, last_run_at = ?,
                   last_status = ?, last_error = NULL, version = version + ?, updated_at = ?
                   WHERE id = ?""",
                (
                    left, int(not finished), None if finished else next_run_at, now,
                    RunStatus.RUNNING.value, int(finished), now, job_id,
                ),
            )  # fmt: skip
            return True

        if not await self.db.write(take):
            return None
        job = await self.get(job_id)
        if job is not None and not job.enabled:
            self._changed()  # the scheduler drops it
        return job

    async def set_session(self, job_id: str, session_id: str) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE cron_jobs SET session_id = ? WHERE id = ?", (session_id, job_id)
            )
        )

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
        kept = output[:MAX_OUTPUT_CHARS] if output is not None else None
        await self.db.write(
            lambda conn: conn.execute(
                """UPDATE cron_jobs SET last_status = ?, last_output = ?, last_error = ?,
                   last_delivery = ?, updated_at = ? WHERE id = ?""",
                (status.value, kept, error, json.dumps(list(delivery)), self.clock(), job_id),
            )
        )

    async def missed(self, job_id: str, error: str, next_run_at: float | None) -> None:
        """The scheduler skipped a run that was too late; a one-shot that missed its time is done."""
        finished = next_run_at is None

        def update(conn: sqlite3.Connection) -> None:
            conn.execute(
                """UPDATE cron_jobs SET last_status = ?, last_error = ?, next_run_at = ?,
                   enabled = CASE WHEN ? THEN 0 ELSE enabled END, version = version + ?, updated_at = ?
                   WHERE id = ?""",
                (
                    RunStatus.MISSED.value, error, next_run_at, finished, int(finished), self.clock(),
                    job_id,
                ),
            )  # fmt: skip

        await self.db.write(update)

    async def interrupted_runs(self) -> int:
        """At start-up: runs a stopped or crashed process left marked running; returns how many."""

        def update(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "UPDATE cron_jobs SET last_status = ?, last_error = ? WHERE last_status = ?",
                (RunStatus.INTERRUPTED.value, "the gateway stopped during the run", RunStatus.RUNNING.value),
            )
            return cursor.rowcount

        return await self.db.write(update)


def _jobs(rows: Sequence[sqlite3.Row] | sqlite3.Cursor) -> list[CronJob]:
    return [_job(row) for row in rows]


def _job(row: sqlite3.Row) -> CronJob:
    return CronJob(
        id=row["id"],
        name=row["name"],
        prompt=row["prompt"],
        schedule=row["schedule"],
        target=ChatAddress(row["platform"], row["chat_id"], row["thread_id"]),
        origin_key=row["origin_key"],
        memory_scope=row["memory_scope"],
        enabled=bool(row["enabled"]),
        repeat=row["repeat"],
        next_run_at=row["next_run_at"],
        last_run_at=row["last_run_at"],
        last_status=RunStatus(row["last_status"]) if row["last_status"] else None,
        last_output=row["last_output"],
        last_error=row["last_error"],
        last_delivery=tuple(json.loads(row["last_delivery"])),
        session_id=row["session_id"],
        version=row["version"],
        created_at=row["created_at"],
        delivery=DeliveryState(row["delivery"]) if row["delivery"] else None,
        delivery_error=row["delivery_error"],
    )
