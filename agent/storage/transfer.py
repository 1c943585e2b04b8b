"""Copying every table of one database into another: ``herald storage migrate --to postgresql://…``.

Both databases are migrated to this Herald's schema first, so they have the same tables and columns.
Rows are copied table by table in foreign-key order, in batches, keeping their ids (messages keep their
positions and stored wire payloads; sessions their exact prompt bytes), and a row the destination
already has (same primary key) is left alone: a second run copies nothing and changes nothing. On
PostgreSQL the id sequences are moved past the copied ids afterwards, so new rows never collide.

Text is made valid on the way (:func:`agent.text.valid_text`, the rule every new text already passes):
releases before NUL characters were dropped stored them in SQLite as they came, and PostgreSQL's
``text`` cannot hold one. Each table's copy says how many values were changed so.

:func:`verify` then compares the two: row counts of every table, and hashes over what a copied session
sends again (:data:`REPLAYED`): every session's stored system prompt and tool list (the bytes the
provider's cache is keyed on), every message's stored contents, and every file's bytes, each in key
order on both sides. A row the destination had already with other contents (a copy made while the
gateway ran, another bot's database) is left alone by the copy and so differs here. The source's text
is hashed as the copy made it (valid), so a cleaned value compares with its copy.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.schema import media, messages, metadata, sessions
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
    """One part of what a session sends again, hashed on both sides: ``query`` selects it in key order."""

    table: str
    what: str  # for the output: "the prompt bytes of N sessions (...)"
    query: sa.Select[tuple[object, ...]]


REPLAYED = (
    Replayed(
        "sessions",
        "the prompt bytes (system prompt, tool list)",
        sa.select(sessions.c.id, sessions.c.system_prompt, sessions.c.tools_json).order_by(sessions.c.id),
    ),
    Replayed(
        "messages",
        "the stored contents (session, position, role, content, tool calls, payload, files, active)",
        sa.select(
            messages.c.id,
            messages.c.session_id,
            messages.c.position,
            messages.c.role,
            messages.c.content,
            messages.c.tool_calls,
            messages.c.tool_call_id,
            messages.c.tool_name,
            messages.c.is_error,
            messages.c.payload,
            messages.c.payload_api,
            messages.c.media,
            messages.c.active,
        ).order_by(messages.c.id),
    ),
    Replayed(
        "media",
        "the bytes",
        sa.select(media.c.sha256, media.c.media_type, media.c.data).order_by(media.c.sha256),
    ),
)


@dataclass
class Verification:
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # table -> (source, destination)
    hashes: dict[str, tuple[str, str]] = field(default_factory=dict)  # REPLAYED table -> (source, dest.)

    @property
    def mismatched(self) -> list[str]:
        """What differs, one line each: counts, then replayed contents."""
        counts = [f"{t}: {s:,} here, {d:,} there" for t, (s, d) in self.counts.items() if s != d]
        contents = [
            f"{part.table}: {part.what}" for part in REPLAYED if len(set(self.hashes[part.table])) > 1
        ]
        return counts + contents

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
    """Row counts of every copied table on both sides, and the hashes of what sessions send again."""
    result = Verification()
    for table in copied_tables():
        count = partial(_count, table=table)
        result.counts[table.name] = (await source.read(count), await destination.read(count))
    for part in REPLAYED:
        digest = partial(content_hash, query=part.query)
        result.hashes[part.table] = (await source.read(digest), await destination.read(digest))
    return result


def prompt_hash(conn: sa.Connection) -> str:
    """SHA-256 over every session's id, stored system prompt and tool list, in id order."""
    return content_hash(conn, query=REPLAYED[0].query)


def content_hash(conn: sa.Connection, *, query: sa.Select[tuple[object, ...]]) -> str:
    """SHA-256 over every value ``query`` selects, in its order; text as valid text (so a source whose
    text the copy made valid compares with its copy), each value tagged with its kind and length."""
    digest = hashlib.sha256()
    for row in conn.execute(query.execution_options(yield_per=BATCH)):
        for value in row:
            digest.update(_canonical(value))
    return digest.hexdigest()


def _canonical(value: object) -> bytes:
    if value is None:
        return b"N;"
    if isinstance(value, str):
        kind, data = b"S", valid_text(value).encode("utf-8")
    elif isinstance(value, bytes | memoryview):
        kind, data = b"B", bytes(value)
    else:  # numbers and flags: the same Python value from either database
        kind, data = b"V", repr(value).encode("ascii")
    return kind + str(len(data)).encode("ascii") + b":" + data
