"""Copying every table of one database into another: ``herald storage migrate --to postgresql://…``.

Both databases are migrated to this Herald's schema first, so they have the same tables and columns.
Rows are copied table by table in foreign-key order, in batches, keeping their ids (messages keep their
positions and stored wire payloads; sessions their exact prompt bytes), and a row the destination
already has (same primary key) is left alone: a second run copies nothing and changes nothing. On
PostgreSQL the id sequences are moved past the copied ids afterwards, so new rows never collide.

Text is made valid on the way (:func:`agent.text.valid_text`, the rule every new text already passes):
releases before NUL characters were dropped stored them in SQLite as they came, and PostgreSQL's
``text`` cannot hold one. Each table's copy says how many values were changed so.

:func:`verify` then compares the two, every table the schema has (a table added later is verified
without being named here): its row count and a hash of each column's values in key order on both
sides, so an outbox row copied as pending that the source has since sent, a job paused after the
copy or a pairing revoked is found, not only a missing row. What a copied session sends again
(:data:`REPLAYED`: every session's stored system prompt and tool list, the bytes the provider's cache
is keyed on; every message's stored contents; every file's bytes) is also hashed on its own, for the
report. A row the destination had already with other contents (another bot's database, a copy the
gateway ran on ``state.db`` after) is left alone by the copy and so differs here. The source's text
is hashed as the copy made it (valid), so a cleaned value compares with its copy.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.schema import metadata, sessions
from agent.storage.sql import insert_for
from agent.text import valid_text

log = logging.getLogger(__name__)

BATCH = 500
# leases: who holds a session now, meaningless in another database. memory_documents, skill_files:
# unused on SQLite (memory and skills are files there); ``herald storage migrate`` copies the files.
SKIPPED = frozenset({"leases", "memory_documents", "skill_files"})


@dataclass
class TableCopy:
    table: str
    source_rows: int
    copied: int
    made_valid: int = 0  # text values changed by valid_text (NUL characters dropped) on the way


@dataclass(frozen=True)
class Replayed:
    """One part of what a session sends again, named in the output with its own hash: ``columns`` of
    ``table`` in key order."""

    table: str
    what: str  # for the output: "the prompt bytes of N sessions (...)"
    columns: tuple[str, ...]


REPLAYED = (
    Replayed(
        "sessions", "the prompt bytes (system prompt, tool list)", ("id", "system_prompt", "tools_json")
    ),
    Replayed(
        "messages",
        "the stored contents (session, position, role, content, tool calls, payload, files, active)",
        (
            "id",
            "session_id",
            "position",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "tool_name",
            "is_error",
            "payload",
            "payload_api",
            "media",
            "active",
        ),
    ),
    Replayed("media", "the bytes", ("sha256", "media_type", "data")),
)


@dataclass(frozen=True)
class TableDigest:
    """One table read in key order: its rows, a hash per column, and the hash of its :data:`REPLAYED`
    columns (empty when it has none)."""

    rows: int
    columns: dict[str, str]
    replayed: str = ""


@dataclass
class Verification:
    source: dict[str, TableDigest] = field(default_factory=dict)
    destination: dict[str, TableDigest] = field(default_factory=dict)

    @property
    def mismatched(self) -> list[str]:
        """What differs, one line per table: its row counts, else the columns whose values differ."""
        lines = []
        for table, here in self.source.items():
            there = self.destination[table]
            if here.rows != there.rows:
                lines.append(f"{table}: {here.rows:,} here, {there.rows:,} there")
                continue
            differing = [name for name, digest in here.columns.items() if there.columns[name] != digest]
            if differing:
                both = f"{here.rows:,} row{'s' if here.rows != 1 else ''} on both sides"
                lines.append(f"{table}: {both}, but other values in {', '.join(differing)}")
        return lines

    @property
    def ok(self) -> bool:
        return not self.mismatched


def copied_tables() -> list[sa.Table]:
    """Every table worth copying, parents before children."""
    return [table for table in metadata.sorted_tables if table.name not in SKIPPED]


async def copy_tables(
    source: Storage, destination: Storage, progress: Callable[[TableCopy], None] | None = None
) -> list[TableCopy]:
    """Copy every row the destination does not have yet; returns what was done per table."""
    done = []
    for table in copied_tables():
        key = list(table.primary_key.columns)
        total = await source.read(partial(_count, table=table))
        copied = made_valid = 0
        offset = 0
        while offset < total:
            query = sa.select(table).order_by(*key).limit(BATCH).offset(offset)
            rows = await source.read(partial(_rows, query=query))
            if not rows:
                break
            made_valid += _make_valid(rows)
            copied += await destination.write(partial(_insert_missing, table=table, rows=rows))
            offset += len(rows)
        if destination.dialect == "postgresql":
            await destination.write(partial(_advance_sequence, table=table))
        step = TableCopy(table.name, total, copied, made_valid)
        done.append(step)
        if progress is not None:
            progress(step)
    return done


def _count(conn: sa.Connection, *, table: sa.Table) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def _rows(conn: sa.Connection, *, query: sa.Select[tuple[object, ...]]) -> list[dict[str, object]]:
    return [dict(row._mapping) for row in conn.execute(query)]


def _make_valid(rows: list[dict[str, object]]) -> int:
    """Pass every text value of ``rows`` through :func:`valid_text`, in place; returns how many changed."""
    changed = 0
    for row in rows:
        for name, value in row.items():
            if isinstance(value, str) and (valid := valid_text(value)) != value:
                row[name] = valid
                changed += 1
    return changed


def _insert_missing(conn: sa.Connection, *, table: sa.Table, rows: list[dict[str, object]]) -> int:
    result = conn.execute(insert_for(conn, table).values(rows).on_conflict_do_nothing())
    return int(result.rowcount or 0)


def _advance_sequence(conn: sa.Connection, *, table: sa.Table) -> None:
    """Move a serial id's sequence past the highest copied id (explicit ids do not advance it)."""
    for column in table.primary_key.columns:
        if column.autoincrement is True and isinstance(column.type, sa.Integer):
            conn.execute(
                sa.text(
                    f"SELECT setval(pg_get_serial_sequence('{table.name}', '{column.name}'), "
                    f"GREATEST((SELECT MAX({column.name}) FROM {table.name}), 1))"
                )
            )


async def verify(source: Storage, destination: Storage) -> Verification:
    """Every copied table read whole on both sides, in key order: its row count and a hash of every
    column (so a state, a flag or a timestamp that differs is found, not only a missing row), with the
    tables taken from the schema itself, so a new table is verified without being named here."""
    result = Verification()
    for table in copied_tables():
        replayed = next((part.columns for part in REPLAYED if part.table == table.name), ())
        result.source[table.name] = await source.read(partial(table_digest, table=table, replayed=replayed))
        result.destination[table.name] = await destination.read(
            partial(table_digest, table=table, replayed=replayed)
        )
    return result


def table_digest(conn: sa.Connection, *, table: sa.Table, replayed: tuple[str, ...] = ()) -> TableDigest:
    """Read ``table`` in primary-key order (bytewise on both databases: PostgreSQL sorts text by its
    collation unless told ``COLLATE "C"``) and hash each column's values (see :func:`_canonical`), and
    the ``replayed`` columns together, row by row."""
    names = [column.name for column in table.columns]
    digests = {name: hashlib.sha256() for name in names}
    together = hashlib.sha256()
    query = sa.select(table).order_by(*_key_order(table, conn.dialect.name))
    rows = 0
    for row in conn.execute(query.execution_options(yield_per=BATCH)):
        rows += 1
        values = row._mapping
        for name in names:
            digests[name].update(_canonical(values[name]))
        for name in replayed:
            together.update(_canonical(values[name]))
    columns = {name: digest.hexdigest() for name, digest in digests.items()}
    return TableDigest(rows, columns, together.hexdigest() if replayed else "")


def _key_order(table: sa.Table, dialect: str) -> list[sa.ColumnElement[Any]]:
    order: list[sa.ColumnElement[Any]] = []
    for column in table.primary_key.columns:
        text = isinstance(column.type, sa.String) and dialect == "postgresql"
        order.append(column.collate("C") if text else column)
    return order


def prompt_hash(conn: sa.Connection) -> str:
    """SHA-256 over every session's id, stored system prompt and tool list, in id order."""
    return table_digest(conn, table=sessions, replayed=REPLAYED[0].columns).replayed


def _canonical(value: object) -> bytes:
    """One value for a hash, tagged with its kind and length; text as valid text (so a source whose text
    the copy made valid compares with its copy)."""
    if value is None:
        return b"N;"
    if isinstance(value, str):
        kind, data = b"S", valid_text(value).encode("utf-8")
    elif isinstance(value, bytes | memoryview):
        kind, data = b"B", bytes(value)
    else:  # numbers and flags: the same Python value from either database
        kind, data = b"V", repr(value).encode("ascii")
    return kind + str(len(data)).encode("ascii") + b":" + data
