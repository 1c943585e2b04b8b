"""What each scope spent per window (``spend_windows``), and who was told about a window (``spend_notices``).

A scope is a key such as ``bot``, ``chat:telegram:dm:42``, ``person:telegram:42``, ``cron:ab12cd``; a
window is ``day:2026-03-14``, ``month:2026-03`` or ``run:<occurrence>`` (``agent.spending``). The rows are
the sums of the ``requests`` table's costs per scope and window, kept as they are written:

Contract:

- :func:`add_spend` runs inside the transaction that stores a request's usage
  (:meth:`agent.store.usage.UsageLedger.record`): the request's row and its cost in every window are
  stored together or not at all. It returns what each window has spent now, over every process.
- :meth:`SpendLedger.spent` and :meth:`SpendLedger.in_periods` read; :meth:`SpendLedger.note_once`
  records that an audience was told about a window and says whether it was the first time (two
  processes noting at once: one of them is first); :meth:`SpendLedger.notices` reads those notes back.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import spend_notices, spend_windows
from agent.db.sql import dialect_insert, insert_ignoring_duplicates

SpendKey = tuple[str, str]  # (scope, period)


@dataclass(frozen=True)
class SpendRow:
    scope: str
    period: str
    spent: float
    requests: int
    updated_at: float


@functools.cache
def _adding(dialect: str) -> Any:
    """``INSERT`` of a window, adding to it when it exists, returning what it spent now. Built once per
    dialect and run with every window's parameters at once (SQLAlchemy sends them as one statement)."""
    statement = dialect_insert(dialect)(spend_windows)
    return statement.on_conflict_do_update(
        index_elements=["scope", "period"],
        set_={
            "spent": spend_windows.c.spent + statement.excluded.spent,
            "requests": spend_windows.c.requests + 1,
            "updated_at": statement.excluded.updated_at,
        },
    ).returning(spend_windows.c.scope, spend_windows.c.period, spend_windows.c.spent)


def add_spend(
    conn: sa.Connection, keys: Sequence[SpendKey], cost: float, now: float
) -> dict[SpendKey, float]:
    """Add one request's ``cost`` to each window of ``keys`` (in the caller's transaction); what each of
    them has spent now."""
    unique = sorted(set(keys))  # in one order everywhere: two transactions never wait for each other
    if not unique:
        return {}
    rows = [
        {"scope": scope, "period": period, "spent": cost, "requests": 1, "updated_at": now}
        for scope, period in unique
    ]
    found = conn.execute(_adding(conn.dialect.name), rows)
    return {(row.scope, row.period): float(row.spent) for row in found}


# Scopes and periods each in a list, not (scope, period) pairs: SQLite reads the whole table for a list
# of two pairs or more, and looks each combination of the two lists up in the primary key.
_SPENT = sa.select(spend_windows.c.scope, spend_windows.c.period, spend_windows.c.spent).where(
    spend_windows.c.scope.in_(sa.bindparam("scopes", expanding=True)),
    spend_windows.c.period.in_(sa.bindparam("periods", expanding=True)),
)
_IN_PERIODS = (
    sa.select(spend_windows)
    .where(spend_windows.c.period.in_(sa.bindparam("periods", expanding=True)))
    .order_by(spend_windows.c.period, spend_windows.c.scope)
)


@dataclass(frozen=True)
class Notice:
    """``audience`` was noted about ``scope``'s window ``period``."""

    scope: str
    period: str
    audience: str


class SpendLedger:
    """The ``spend_windows`` and ``spend_notices`` tables."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def spent(self, keys: Sequence[SpendKey]) -> dict[SpendKey, float]:
        """What the windows of ``keys`` have spent (a window without spending is left out)."""
        if not keys:
            return {}
        wanted = set(keys)
        scopes, periods = sorted({scope for scope, _ in wanted}), sorted({period for _, period in wanted})
        parameters = {"scopes": scopes, "periods": periods}
        rows = await self.storage.read(lambda conn: conn.execute(_SPENT, parameters).all())
        found = {(row.scope, row.period): float(row.spent) for row in rows}
        return {key: spent for key, spent in found.items() if key in wanted}

    async def in_periods(self, periods: Sequence[str]) -> list[SpendRow]:
        """Every scope's spending in the windows ``periods`` (``day:2026-03-14`` ...)."""
        parameters = {"periods": list(periods)}
        rows = await self.storage.read(lambda conn: conn.execute(_IN_PERIODS, parameters).all())
        return [
            SpendRow(row.scope, row.period, float(row.spent), int(row.requests), float(row.updated_at))
            for row in rows
        ]

    async def notices(self, periods: Sequence[str], audience_prefix: str) -> list[Notice]:
        """The notes of ``periods``' windows whose audience starts with ``audience_prefix``, oldest first."""
        if not periods:
            return []
        query = (
            sa.select(spend_notices.c.scope, spend_notices.c.period, spend_notices.c.audience)
            .where(spend_notices.c.period.in_(list(periods)))
            .where(spend_notices.c.audience.startswith(audience_prefix, autoescape=True))
            .order_by(spend_notices.c.created_at)
        )
        rows = await self.storage.read(lambda conn: conn.execute(query).all())
        return [Notice(row.scope, row.period, row.audience) for row in rows]

    async def note_once(self, scope: str, period: str, audience: str) -> bool:
        """Record that ``audience`` was told about ``scope``'s window ``period``; False if it was already."""
        row = {"scope": scope, "period": period, "audience": audience, "created_at": time.time()}
        inserted = await self.storage.write(lambda conn: insert_ignoring_duplicates(conn, spend_notices, row))
        return inserted == 1
