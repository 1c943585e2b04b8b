"""No query a turn makes reads a table that grows with the home's history from end to end: each one
finds its rows through an index, so a turn costs the same in a home of ten years as in a new one.

The SQL of a steady-state turn (a chat that already has a session) is captured as SQLite runs it, and
SQLite's own plan for each statement (``EXPLAIN QUERY PLAN``) is read: a ``SCAN`` of a growing table
(one without an index) fails the test, naming the statement."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND, telegram_gateway

pytestmark = pytest.mark.sqlite_itself  # SQLite's plans; PostgreSQL plans by its statistics

# Tables with a row per message, request, update, reply or spend: they grow for as long as the home is used.
GROWING = {
    "messages", "requests", "inbox", "outbox", "usage_days", "cache_prefixes", "cache_misses",
    "spend_windows", "spend_notices", "tool_audit", "chat_people", "media", "sessions", "adapter_records",
}  # fmt: skip
# "SCAN t" or "SCAN t USING INDEX i": every row of t (or of its index) is read. "SEARCH t ..." is a lookup,
# and a scan of a partial index (the pending rows only) reads what is waiting, not the history.
FULL_READ = re.compile(r"\bSCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?")
# A lookup by platform alone reads every row a platform ever had (a platform is not a chat).
PLATFORM_READ = re.compile(r"\bSEARCH (\w+) USING (?:COVERING )?INDEX (\w+) \(platform=\?\)")


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
        if (found := FULL_READ.search(row[3]) or PLATFORM_READ.search(row[3]))
        and found[1] in GROWING
        and found[2] not in partial
    ]


async def test_a_turn_reads_no_growing_table_whole(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "hello")  # the chat's session is made
        await harness.settled()
        with captured_sql() as statements:
            harness.fake.private_message(FRIEND, "and how are you?")
            await harness.settled()
        assert len(harness.texts(FRIEND)) == 2

    distinct = {statement: parameters for statement, parameters in statements}
    assert any("INSERT INTO messages" in statement for statement in distinct)  # the turn was captured
    database = sqlite3.connect(home.root / "state.db")
    try:
        scans = {s: lines for s, p in distinct.items() if (lines := full_reads(database, s, p))}
    finally:
        database.close()
    assert not scans, "\n\n".join(f"{' | '.join(lines)}:\n{s}" for s, lines in scans.items())
