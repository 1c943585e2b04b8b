"""Which statements read a table that grows with the home's history from end to end: SQL captured as
SQLAlchemy runs it, and SQLite's own plan for each statement (``EXPLAIN QUERY PLAN``). A ``SCAN`` of a
growing table (or of all of its index) is such a read; a ``SEARCH`` is a lookup. For the tests that show
a turn, a console page or a report costs the same in a home of ten years as in a new one."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

# Tables with a row per message, request, update, reply or spend: they grow for as long as the home is used.
GROWING = {
    "messages", "requests", "inbox", "outbox", "usage_days", "cache_prefixes", "cache_misses",
    "spend_windows", "spend_notices", "tool_audit", "chat_people", "media", "sessions", "adapter_records",
}  # fmt: skip
# "SCAN t" or "SCAN t USING INDEX i": every row of t (or of its index) is read. "SEARCH t ..." is a lookup,
# and a scan of a partial index (the pending rows only) reads what is waiting, not the history.
FULL_READ = re.compile(r"\bSCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?")
# A lookup by platform, purpose or batch alone reads every row a platform ever had (a platform is not a
# chat), every turn of the home, every request sent alone: a value shared by much of the history.
BROAD = r"(?:platform|purpose|batch)=\?"
BROAD_READ = re.compile(rf"\bSEARCH (\w+) USING (?:COVERING )?INDEX (\w+) \({BROAD}(?: AND {BROAD})*\)")


@contextmanager
def captured_sql() -> Iterator[list[tuple[str, Any]]]:
    """Every statement any SQLAlchemy engine runs meanwhile, with its (first) parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        batch = isinstance(parameters, list) and parameters and isinstance(parameters[0], tuple | dict)
        seen.append((statement, parameters[0] if batch else parameters))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)


def partial_indexes(database: sqlite3.Connection) -> set[str]:
    found = database.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'")
    return {name for (name,) in found}


def full_reads(database: sqlite3.Connection, statement: str, parameters: Any) -> list[str]:
    """The plan lines of ``statement`` that read a growing table whole."""
    if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "INSERT", "WITH")):
        return []  # BEGIN, COMMIT, PRAGMA, SAVEPOINT
    plan = database.execute(f"EXPLAIN QUERY PLAN {statement}", parameters or ()).fetchall()
    partial = partial_indexes(database)
    return [
        row[3]
        for row in plan
        if (found := FULL_READ.search(row[3]) or BROAD_READ.search(row[3]))
        and found[1] in GROWING
        and found[2] not in partial
    ]


def growing_reads(database: Path, statements: Sequence[tuple[str, Any]]) -> dict[str, list[str]]:
    """Each of ``statements`` (as :func:`captured_sql` caught them) that reads a growing table of the
    SQLite ``database`` whole, with the plan lines that do."""
    distinct = {statement: parameters for statement, parameters in statements}
    with closing(sqlite3.connect(database)) as connection:
        return {s: lines for s, p in distinct.items() if (lines := full_reads(connection, s, p))}


def described(reads: dict[str, list[str]]) -> str:
    """:func:`growing_reads`'s statements, each after its plan lines (an assertion's message)."""
    return "\n\n".join(f"{' | '.join(lines)}:\n{statement}" for statement, lines in reads.items())
