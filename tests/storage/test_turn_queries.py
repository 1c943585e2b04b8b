"""No query a turn makes reads a table that grows with the home's history from end to end: each one
finds its rows through an index, so a turn costs the same in a home of ten years as in a new one.

The SQL of a steady-state turn (a chat that already has a session) is captured as SQLite runs it, and
SQLite's own plan for each statement (``EXPLAIN QUERY PLAN``) is read: a ``SCAN`` of a growing table
(one without an index) fails the test, naming the statement."""

from __future__ import annotations

import pytest

from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND, telegram_gateway
from tests.query_plan_support import captured_sql, described, growing_reads

pytestmark = pytest.mark.sqlite_itself  # SQLite's plans; PostgreSQL plans by its statistics


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

    assert any("INSERT INTO messages" in statement for statement, _ in statements)  # the turn was captured
    scans = growing_reads(home.root / "state.db", statements)
    assert not scans, described(scans)
