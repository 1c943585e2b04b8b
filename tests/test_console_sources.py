"""What the console shows of spend limits and cache misses, read through its two interfaces
(``gateway.console.sources``): with none (the default) it says so; with sources it shows each budget
line, each chat's share and misses, the misses on the turn chart and the cache efficiency."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from gateway.console.serve import build_console
from gateway.console.sources import BudgetLine, CacheMiss, CacheMissSummary
from gateway.home import HeraldHome
from tests.console_support import CONSOLE_TOKEN, ConsoleHarness, console_client, console_gateway
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND

pytestmark = [pytest.mark.timeout(90), pytest.mark.sqlite_only]  # the pages, not the database

KEY = f"telegram:dm:{FRIEND}"


class Budgets:
    async def lines(self) -> list[BudgetLine]:
        return [
            BudgetLine("bot", "day", 1.5, 10.0, 1_900_000_000.0),
            BudgetLine("chat <b>Ops</b>", "month", 4.5, 5.0, 1_900_000_000.0),
        ]

    async def used_by_chat(self, session_keys: Sequence[str]) -> Mapping[str, float]:
        return {KEY: 0.9} if KEY in session_keys else {}


class Misses:
    def __init__(self) -> None:
        self.asked: list[Sequence[int]] = []

    @property
    def measured(self) -> bool:
        return True

    async def summary(self, since: float) -> CacheMissSummary | None:
        causes = {"ttl": 2, "model": 1}
        return CacheMissSummary(events=3, tokens=12_000, usd=0.04, by_cause=causes, expected_read=4)

    async def counts(self, session_keys: Sequence[str]) -> Mapping[str, int]:
        return {KEY: 3} if KEY in session_keys else {}

    async def of_chat(self, session_key: str, request_ids: Sequence[int]) -> list[CacheMiss]:
        self.asked.append(request_ids)
        return [CacheMiss(request_ids[-1], 0.0, "ttl", 9_000, 0.03)] if session_key == KEY else []


@asynccontextmanager
async def served_with_sources(console: ConsoleHarness, misses: Misses) -> AsyncIterator[str]:
    """The running gateway's console built again with ``Budgets`` and ``misses``, served on its own."""
    gateway = console.harness.gateway
    config = gateway.services.runtime.config
    app = await build_console(
        config,
        gateway.services,
        {"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN},
        readiness=gateway.http.readiness,
        budgets=Budgets(),
        misses=misses,
    )
    assert app is not None
    root = web.Application()
    root.add_subapp("/console", app)
    runner = web.AppRunner(root)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_without_sources_the_pages_say_there_is_nothing_to_show(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with (
        console_gateway(home, emulator, emulator_url) as console,
        console_client(console.url) as client,
    ):
        console.harness.fake.private_message(FRIEND, "hello")
        await console.harness.settled()
        await client.login()
        budgets = (await client.get("/console/budgets"))[1]
        overview = (await client.get("/console/"))[1]
        chat = (await client.get(f"/console/chat?key={KEY}"))[1]
    assert "No budgets configured." in budgets
    assert "cache misses are not measured" in overview and "Cache misses, last 30 days" not in overview
    assert 'class="miss"' not in chat and "<h2>Cache misses</h2>" not in chat


async def test_budgets_and_cache_misses_from_their_sources(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    misses = Misses()
    async with console_gateway(home, emulator, emulator_url) as console:
        console.harness.fake.private_message(FRIEND, "hello")
        console.harness.fake.private_message(FRIEND, "and again")
        await console.harness.settled()
        async with served_with_sources(console, misses) as url, console_client(url) as client:
            await client.login()
            budgets = (await client.get("/console/budgets"))[1]
            chats = (await client.get("/console/chats"))[1]
            chat = (await client.get(f"/console/chat?key={KEY}"))[1]
            overview = (await client.get("/console/"))[1]

    assert "chat &lt;b&gt;Ops&lt;/b&gt;" in budgets and "<b>Ops" not in budgets
    assert re.search(r"\$4\.50</td>\s*<td class=\"num\">\$5\.00</td>", budgets)
    assert 'value="0.9"' in budgets and "90.0%" in budgets
    row = re.search(rf'<tr data-key="{KEY}">(.*?)</tr>', chats, re.S)
    assert row is not None and "90.0%" in row.group(1) and '<td class="num">3</td>' in row.group(1)
    assert len(misses.asked) == 1 and len(misses.asked[0]) == 2  # asked about the chart's two requests
    assert chat.count('<path class="miss"') == 1
    assert "<title>cache miss (ttl): 9,000 tokens, $0.03</title>" in chat
    assert "<td>ttl</td>" in chat
    assert "Cache misses, last 30 days" in overview and "ttl: 2" in overview
    assert "cache misses are not measured" not in overview  # the efficiency is shown
