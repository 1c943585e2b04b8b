"""Requests waiting in a provider's batch (the ``batch_requests`` table), so a restart waits on for them.

A batch request is found again by what it asks: its session and the digest of its body. A run cut off
by a restart builds the same request again (its history is the same, its prompt bytes are stored), so
it finds the batch it submitted instead of paying for a second one, and polls it on.

States: ``waiting`` (submitted) → ``ended`` (its answer stored here, its usage not recorded yet) →
``recorded`` (usage recorded: the answer may be given again to the same request, never billed again);
or ``abandoned`` (it missed its deadline, failed or was cancelled: a normal request took its place).

Contract: each change is one statement that moves a row forward only (``ended`` and ``recorded`` never
go back, ``abandoned`` only from ``waiting``), so a change repeated after a restart does nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import batch_requests


class BatchState(StrEnum):
    WAITING = "waiting"
    ENDED = "ended"
    RECORDED = "recorded"
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class BatchRecord:
    custom_id: str
    session_id: str
    purpose: str
    provider: str
    model: str
    digest: str
    run: str | None  # what it was sent for (a job's run), when that outlives a process
    batch_id: str
    state: BatchState
    response: str | None  # the answer as JSON (agent.providers.batches.response_json), once ended
    submitted_at: float
    deadline_at: float


def _record(row: Any) -> BatchRecord:
    return BatchRecord(
        custom_id=row.custom_id,
        session_id=row.session_id,
        purpose=row.purpose,
        provider=row.provider,
        model=row.model,
        digest=row.digest,
        run=row.run,
        batch_id=row.batch_id,
        state=BatchState(row.state),
        response=row.response,
        submitted_at=row.submitted_at,
        deadline_at=row.deadline_at,
    )


_LIVE = batch_requests.c.state != BatchState.ABANDONED.value
_FIND = (
    sa.select(batch_requests)
    .where(
        batch_requests.c.session_id == sa.bindparam("session_id"),
        batch_requests.c.digest == sa.bindparam("digest"),
        _LIVE,
    )
    .order_by(batch_requests.c.submitted_at.desc())
    .limit(1)
)


class BatchRequests:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def find(self, session_id: str, digest: str) -> BatchRecord | None:
        """The newest batch request of ``session_id`` with this body that was not abandoned."""
        parameters = {"session_id": session_id, "digest": digest}
        row = await self.storage.read(lambda conn: conn.execute(_FIND, parameters).first())
        return None if row is None else _record(row)

    async def add(self, record: BatchRecord, now: float) -> None:
        values = {name: getattr(record, name) for name in BatchRecord.__dataclass_fields__}
        values["state"] = record.state.value
        statement = sa.insert(batch_requests).values(**values, updated_at=now)
        await self.storage.write(lambda conn: conn.execute(statement))

    async def ended(self, custom_id: str, response: str, now: float) -> None:
        """Its answer arrived: stored before its usage is recorded."""
        await self._move(custom_id, (BatchState.WAITING,), BatchState.ENDED, now, response=response)

    async def recorded(self, custom_id: str, now: float) -> None:
        await self._move(custom_id, (BatchState.ENDED,), BatchState.RECORDED, now)

    async def abandon(self, custom_id: str, now: float) -> None:
        await self._move(custom_id, (BatchState.WAITING,), BatchState.ABANDONED, now)

    async def waiting_runs(self, prefix: str) -> set[str]:
        """The runs starting with ``prefix`` whose batch request is not answered and recorded yet."""
        statement = sa.select(batch_requests.c.run).where(
            batch_requests.c.run.startswith(prefix, autoescape=True),
            batch_requests.c.state.in_([BatchState.WAITING.value, BatchState.ENDED.value]),
        )
        rows = await self.storage.read(lambda conn: conn.execute(statement).scalars().all())
        return {run for run in rows if run is not None}

    async def _move(
        self, custom_id: str, sources: tuple[BatchState, ...], target: BatchState, now: float, **values: Any
    ) -> None:
        statement = (
            sa.update(batch_requests)
            .where(
                batch_requests.c.custom_id == custom_id,
                batch_requests.c.state.in_([state.value for state in sources]),
            )
            .values(state=target.value, updated_at=now, **values)
        )
        await self.storage.write(lambda conn: conn.execute(statement))
