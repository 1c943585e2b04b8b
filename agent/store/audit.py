"""The audit of the owner's tools (``tool_audit``): every command, file operation and approval decision.

A command is recorded *before* it starts (:meth:`AuditLog.begin`, outcome ``running``) and completed
when it ends (:meth:`AuditLog.finish`): when the record cannot be written, the command does not run,
and a process that dies mid-command leaves a ``running`` row that says so. Quick operations (a file
read) are recorded once, after (:meth:`AuditLog.record`). Decisions on approvals are rows of their
own, with who decided. Rows are deleted after ``storage.retention.audit_days`` (``agent.store.retention``),
or with their chat (``herald sessions delete``).

Contract: each method is one transaction; :meth:`AuditLog.entries` sees every row written before it
was called, newest first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import tool_audit

DETAIL_CHARS = 2000  # a row's detail is cut to this
ACTION_CHARS = 20_000  # a command longer than this is recorded cut, saying how long it was


class Outcome(StrEnum):
    RUNNING = "running"  # started, not ended (yet: or its process died)
    RAN = "ran"  # ended by itself (a command: whatever its exit code), or a file operation done
    FAILED = "failed"  # refused or failed before or while running (outside the allowed folders ...)
    TIMED_OUT = "timed_out"  # stopped at its timeout
    STOPPED = "stopped"  # stopped by /stop, the jobs tool or shutdown
    STARTED = "started"  # a background command is running
    HELD = "held"  # waiting for approval
    APPROVED_ONCE = "approved_once"
    APPROVED_SESSION = "approved_session"
    GRANTED = "granted"  # allowed by an approval for the session given earlier
    DENIED = "denied"
    EXPIRED = "expired"  # no answer in time: a no
    WITHDRAWN = "withdrawn"  # the turn that asked was stopped before anyone answered
    NOBODY = "nobody"  # refused: nobody could be asked (a scheduled run, a sub-agent)


@dataclass(frozen=True)
class AuditEntry:
    session_key: str
    session_id: str
    tool: str
    action: str
    outcome: Outcome
    detail: str = ""
    exit_code: int | None = None
    person: str | None = None
    decided_by: str | None = None
    code: str | None = None
    runner: str | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    id: int | None = None


class AuditLog:
    """The ``tool_audit`` table."""

    def __init__(self, storage: Storage, *, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock

    async def record(self, entry: AuditEntry) -> int:
        """Add a finished row (or a decision); returns its id."""
        now = self.clock()
        return await self._insert(replace(entry, created_at=entry.created_at or now, finished_at=now))

    async def begin(self, entry: AuditEntry) -> int:
        """Add a row for something about to run (outcome ``running``); returns its id."""
        return await self._insert(replace(entry, outcome=Outcome.RUNNING, created_at=self.clock()))

    async def finish(
        self, entry_id: int, outcome: Outcome, *, detail: str = "", exit_code: int | None = None
    ) -> None:
        values = {
            "outcome": outcome.value,
            "detail": _cut(detail, DETAIL_CHARS),
            "exit_code": exit_code,
            "finished_at": self.clock(),
        }
        statement = sa.update(tool_audit).where(tool_audit.c.id == entry_id).values(**values)
        await self.storage.write(lambda conn: conn.execute(statement))

    async def entries(
        self,
        *,
        session_key: str | None = None,
        tool: str | None = None,
        outcomes: tuple[Outcome, ...] = (),
        since: float | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        """Rows matching every filter given, newest first."""
        query = sa.select(tool_audit).order_by(tool_audit.c.id.desc()).limit(limit)
        if session_key is not None:
            query = query.where(tool_audit.c.session_key == session_key)
        if tool is not None:
            query = query.where(tool_audit.c.tool == tool)
        if outcomes:
            query = query.where(tool_audit.c.outcome.in_([outcome.value for outcome in outcomes]))
        if since is not None:
            query = query.where(tool_audit.c.created_at >= since)
        return await self.storage.read(lambda conn: [_entry(row) for row in conn.execute(query)])

    async def _insert(self, entry: AuditEntry) -> int:
        values = {
            "session_key": entry.session_key,
            "session_id": entry.session_id,
            "tool": entry.tool,
            "action": _cut(entry.action, ACTION_CHARS),
            "outcome": entry.outcome.value,
            "detail": _cut(entry.detail, DETAIL_CHARS),
            "exit_code": entry.exit_code,
            "person": entry.person,
            "decided_by": entry.decided_by,
            "code": entry.code,
            "runner": entry.runner,
            "created_at": entry.created_at,
            "finished_at": entry.finished_at,
        }
        statement = sa.insert(tool_audit).values(**values).returning(tool_audit.c.id)
        return await self.storage.write(lambda conn: int(conn.execute(statement).scalar_one()))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text):,} characters in all]"


def _entry(row: sa.Row[Any]) -> AuditEntry:
    return AuditEntry(
        session_key=row.session_key,
        session_id=row.session_id,
        tool=row.tool,
        action=row.action,
        outcome=Outcome(row.outcome),
        detail=row.detail,
        exit_code=row.exit_code,
        person=row.person,
        decided_by=row.decided_by,
        code=row.code,
        runner=row.runner,
        created_at=row.created_at,
        finished_at=row.finished_at,
        id=int(row.id),
    )
