"""The few statements whose SQL differs between SQLite and PostgreSQL, in one place.

Both dialects spell an upsert ``INSERT ... ON CONFLICT (...) DO UPDATE``, but SQLAlchemy builds it from
each dialect's own ``insert``; :func:`upsert` picks the right one from the connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


def insert_for(conn: sa.Connection, table: sa.Table) -> Any:
    """The dialect's ``insert`` (it has ``on_conflict_do_nothing`` / ``on_conflict_do_update``)."""
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def upsert(
    conn: sa.Connection,
    table: sa.Table,
    values: Mapping[str, Any],
    keys: Sequence[str],
    update: Sequence[str] | None = None,
) -> None:
    """Insert ``values``, or update the row with the same ``keys`` (columns ``update``; default: every
    column that is not a key)."""
    statement = insert_for(conn, table).values(**values)
    columns = update if update is not None else [name for name in values if name not in keys]
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=list(keys), set_={name: statement.excluded[name] for name in columns}
        )
    )


def insert_ignoring_duplicates(conn: sa.Connection, table: sa.Table, values: Mapping[str, Any]) -> int:
    """Insert ``values`` unless a row with the same unique key exists; returns rows inserted (0 or 1)."""
    result = conn.execute(insert_for(conn, table).values(**values).on_conflict_do_nothing())
    return int(result.rowcount or 0)


def serialize(conn: sa.Connection, key: str) -> None:
    """Run the rest of this write transaction alone among those that serialize on ``key``: for a
    decision read from rows other transactions may be inserting (a count, an absence), which ``FOR
    UPDATE`` cannot lock.

    PostgreSQL: a transaction-scoped advisory lock on a hash of ``key``, released at commit or rollback.
    SQLite: nothing to do, a write transaction already runs alone (``BEGIN IMMEDIATE``).
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtextextended(key, 0))))
