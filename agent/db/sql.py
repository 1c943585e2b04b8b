"""The few statements whose SQL differs between SQLite and PostgreSQL, in one place.

Both dialects spell an upsert ``INSERT ... ON CONFLICT (...) DO UPDATE``, but SQLAlchemy builds it from
each dialect's own ``insert``; :func:`upsert` picks the right one from the connection. A key of a JSON
object kept as text (:class:`json_text`) is ``json_extract`` on SQLite and ``->>`` on PostgreSQL.
(Full-text search, the largest difference, is :mod:`agent.db.search`.)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal


def dialect_insert(dialect: str) -> Any:
    """The ``insert`` of ``dialect`` (it has ``on_conflict_do_nothing`` / ``on_conflict_do_update``).
    PostgreSQL's dialect is imported only for PostgreSQL: a process on SQLite need not hold it."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    return sqlite.insert


def insert_for(conn: sa.Connection, table: sa.Table) -> Any:
    """The connection's dialect's ``insert`` of ``table``."""
    return dialect_insert(conn.dialect.name)(table)


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
    result = conn.execute(insert_or_ignore(conn.dialect.name, table), values)
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


@functools.cache
def insert_or_ignore(dialect: str, table: sa.Table) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` into ``table`` for ``dialect``, built once (a statement
    built per call costs more than running it); execute it with the row(s) as parameters."""
    return dialect_insert(dialect)(table).on_conflict_do_nothing()


class json_text(sa.ColumnElement[str]):  # lower case: it reads like the SQL function it stands for
    """The value of ``key`` in the JSON object a text ``column`` holds, as text; NULL when the key is
    absent or null. Dialect-neutral, so a statement using it can be built once at module level."""

    type = sa.Text()
    inherit_cache = True
    _traverse_internals: list[tuple[str, InternalTraversal]] = [  # noqa: RUF012 - SQLAlchemy reads it
        ("column", InternalTraversal.dp_clauseelement),
        ("key", InternalTraversal.dp_string),
    ]

    def __init__(self, column: sa.ColumnElement[str], key: str) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"JSON key {key!r} is not a plain name")  # it is written into the SQL
        self.column = column
        self.key = key

    @property
    def _from_objects(self) -> list[sa.FromClause]:  # the tables it reads, for the statement's FROM
        return self.column._from_objects


@compiles(json_text, "sqlite")
def _json_text_sqlite(element: json_text, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_extract({compiler.process(element.column, **kw)}, '$.{element.key}')"


@compiles(json_text, "postgresql")
def _json_text_postgresql(element: json_text, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(CAST({compiler.process(element.column, **kw)} AS JSONB) ->> '{element.key}')"
