"""The console's page of one chat costs the same in a home of ten years as in a new one: every statement
it runs (the chat's row, its requests, what each purpose cost, its sessions, replies, cache misses, its
budget) finds its rows through an index, by the chat or its sessions, never by reading a table that
grows with the home's history whole (SQLite's own plan of each, ``EXPLAIN QUERY PLAN``). The overview
reads the requests of its 30 days by time, and the all-time totals from the sessions' own, in an index."""

from __future__ import annotations

import pytest

from gateway.home import HeraldHome
from tests.console_support import console_client, console_gateway
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND
from tests.query_plan_support import captured_sql, described, growing_reads

pytestmark = pytest.mark.sqlite_itself  # SQLite's plans; PostgreSQL plans by its statistics

LIMITS = {"chat": {"daily_usd": 2.0, "monthly_usd": 20.0}}  # the page shows the chat's day and month


async def test_a_chats_page_reads_no_growing_table_whole(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with console_gateway(home, emulator, emulator_url, budgets=LIMITS) as console:
        console.harness.fake.private_message(FRIEND, "hello")
        await console.harness.settled()
        async with console_client(console.url) as client:
            await client.login()
            with captured_sql() as statements:
                answered, page, _ = await client.get(f"/console/chat?key=telegram:dm:{FRIEND}")

    assert answered == 200 and "main turns (1 requests)" in page
    read = " ".join(statement for statement, _ in statements)
    assert all(table in read for table in ("requests", "usage_days", "spend_windows", "outbox"))
    scans = growing_reads(home.root / "state.db", statements)
    assert not scans, described(scans)


async def test_the_overview_reads_its_days_requests_by_time(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with console_gateway(home, emulator, emulator_url) as console:
        console.harness.fake.private_message(FRIEND, "hello")
        await console.harness.settled()
        async with console_client(console.url) as client:
            await client.login()
            with captured_sql() as statements:
                answered, _, _ = await client.get("/console/")  # the first view: 30 days, then today

    assert answered == 200
    scans = growing_reads(home.root / "state.db", statements)
    read_whole = {line for lines in scans.values() for line in lines}
    all_time = "SCAN sessions USING COVERING INDEX sessions_by_update"  # every session's totals, no row
    assert read_whole <= {all_time}, described(scans)
