"""What the console shows of spend limits and cache misses, from a running gateway's own figures: a chat
over its limit on the Budgets page, in the chat list and on its page; a cache miss on its chart, in
its chat's table, in the list and in the overview; the same figures ``herald budget``, ``herald
insights`` and ``/insights`` give. A bot without limits or misses says so."""

from __future__ import annotations

import re
import time

import pytest

from gateway.budgets.book import pairs
from gateway.budgets.lines import usd
from gateway.console.charts import money
from gateway.home import HeraldHome
from tests.console_support import ConsoleHarness, console_client, console_gateway
from tests.emulator import ProviderEmulator
from tests.gateway_support import ADMIN, FRIEND
from tests.helpers import herald_cli, write_project_notes

pytestmark = pytest.mark.timeout(120)

GROUP = -100
GROUP_KEY = f"telegram:group:{GROUP}"
DM_KEY = f"telegram:dm:{FRIEND}"


def row_of(page: str, marker: str) -> str:
    """The table row of ``page`` that carries ``marker`` (an attribute such as data-key="...")."""
    found = re.search(rf"<tr [^>]*{re.escape(marker)}[^>]*>(.*?)</tr>", page, re.S)
    assert found is not None, f"no row with {marker}"
    return found.group(1)


def emulated_clock(console: ConsoleHarness, emulator: ProviderEmulator) -> None:
    """The agent's clock follows the emulator's, so a pause is a move of the emulated clock."""
    start = time.time()
    console.harness.gateway.services.runtime.agent.clock = lambda: start + emulator.clock.now()


async def test_a_chat_over_its_limit_shows_where_it_stands_as_herald_budget_says(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    budgets = {"chat": {"daily_usd": 0.001, "monthly_usd": 5.0}, "exempt_admins": True}
    async with console_gateway(home, emulator, emulator_url, budgets=budgets) as console:
        fake = console.harness.fake
        fake.group_message(GROUP, ADMIN, "hello, it's me", mention_bot=True, title="Ops")  # exempt, counted
        await console.harness.settled()
        fake.group_message(GROUP, FRIEND, "and me?", mention_bot=True, title="Ops")
        await console.harness.settled()
        refused = console.harness.texts(GROUP)[-1]
        book = console.harness.gateway.services.budgets.book
        standing = {(day.kind, day.id): (day, month) for day, month in pairs(await book.standing())}
        async with console_client(console.url) as client:
            await client.login()
            budgets_page = (await client.get("/console/budgets"))[1]
            chat_page = (await client.get(f"/console/chat?key={GROUP_KEY}"))[1]
            chats = (await client.get("/console/chats?sort=budget"))[1]
            overview = (await client.get("/console/"))[1]
        report = await herald_cli("budget")

    assert refused.startswith("This chat has used its $0.001 for today; it resets at 00:00")
    day, month = standing[("chat", GROUP_KEY)]
    assert day.spent > 0.001 and day.limit == 0.001 and month.limit == 5.0
    line = row_of(budgets_page, f'data-scope="chat:{GROUP_KEY}"')
    assert f'{usd(day.spent)} of $0.001 · <span class="share">{day.spent / 0.001:.1%}</span>' in line
    assert f'{usd(month.spent)} of $5.00 · <span class="share">{month.spent / 5.0:.1%}</span>' in line
    assert '<svg class="bar over"' in line and "at its limit" in line
    month_cell = line.split('data-window="month"')[1]  # a month with a limit says where it is heading
    assert '<div class="forecast sub">at this pace $' in month_cell and "this month" in month_cell
    assert "forecast" not in line.split('data-window="month"')[0]  # a day has no forecast
    projected = overview.split('id="projected"')[1].split("</div>\n  </div>")[0]
    assert "spent so far; no monthly limit" in projected
    assert f"/console/chat?key={GROUP_KEY.replace(':', '%3A')}" in line  # the scope leads to its chat
    admin_day, _ = standing[("person", f"telegram:{ADMIN}")]
    assert f"{usd(admin_day.spent)}</div>" in row_of(budgets_page, f'data-scope="person:telegram:{ADMIN}"')
    assert "Limits: each chat $0.001/day, $5.00/month." in budgets_page
    spent_line = next(line for line in report.splitlines() if line.startswith(f"chat {GROUP_KEY} "))
    assert spent_line.split()[2:] == [usd(day.spent), usd(month.spent)]  # what herald budget says it spent

    card = re.search(r'id="budget-card">(.*?)</div></div>', chat_page, re.S)
    assert card is not None and f"{day.spent / 0.001:.1%}" in card.group(1)
    assert "at its limit until" in card.group(1)
    assert f"{usd(day.spent)} of $0.001" in row_of(chat_page, 'data-window="day"')
    assert f'data-budget="{day.spent / 0.001:.6f}"' in row_of(chats, f'data-key="{GROUP_KEY}"')


async def test_a_cache_miss_shows_as_herald_insights_and_insights_count_it(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()  # a prompt over the model's cache minimum
    caching = {"cache_ttl": "5m"}  # the whole prompt lapses in a pause of 10 minutes
    async with console_gateway(home, emulator, emulator_url, prompt_caching=caching) as console:
        emulated_clock(console, emulator)
        fake = console.harness.fake
        for text in ("hello", "and one more"):
            fake.private_message(FRIEND, text)
            await console.harness.settled()
            emulator.clock.advance(20)
        emulator.clock.advance(10 * 60)  # past the 5-minute TTL
        fake.private_message(FRIEND, "back again")
        await console.harness.settled()
        fake.private_message(FRIEND, "/insights")
        await console.harness.settled()
        in_chat = console.harness.texts(FRIEND)[-1]
        store = console.harness.gateway.services.runtime.store
        [miss] = await store.cache_misses.of_chat(DM_KEY)
        async with console_client(console.url) as client:
            await client.login()
            overview = (await client.get("/console/"))[1]
            chat_page = (await client.get(f"/console/chat?key={DM_KEY}"))[1]
            chats = (await client.get("/console/chats?sort=misses"))[1]
        purposes = await store.usage.by_purpose()
        report = await herald_cli("insights")

    assert miss.cause == "ttl_expired" and miss.missed_tokens > 1_000
    figures = f"{miss.missed_tokens:,}"
    assert "TTL expired" in report and figures in report and f"{miss.missed_usd:.4f}" in report
    assert "TTL expired" in in_chat and figures in in_chat
    cause = row_of(overview, 'data-cause="ttl_expired"')
    cells = f'<td class="num">1</td><td class="num">{figures}</td><td class="num">{money(miss.missed_usd)}'
    assert cells in cause
    read = sum(p.usage.cache_read_tokens for p in purposes)  # every request is of the last 30 days
    efficiency = re.search(r'id="efficiency">.*?<div class="value">([\d.]+)%</div>', overview, re.S)
    assert efficiency is not None
    assert float(efficiency.group(1)) == round(100 * read / (read + miss.missed_tokens), 1)

    assert chat_page.count('<path class="miss ttl_expired" data-cause="ttl_expired"') == 1
    assert f"cache miss (TTL expired): {figures} tokens not read from the cache" in chat_page
    assert '<span class="miss ttl_expired" data-cause="ttl_expired">TTL expired</span>' in chat_page  # legend
    table = row_of(chat_page, f'data-request="{miss.request_id}"')
    assert ">TTL expired</td>" in table and f">{figures}</td>" in table and "idle 10m" in table
    assert 'data-misses="1"' in row_of(chats, f'data-key="{DM_KEY}"')


async def test_a_bot_without_limits_or_misses_says_so(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url) as console:
        console.harness.fake.private_message(FRIEND, "hello")
        await console.harness.settled()
        async with console_client(console.url) as client:
            await client.login()
            budgets = (await client.get("/console/budgets"))[1]
            overview = (await client.get("/console/"))[1]
            chat = (await client.get(f"/console/chat?key={DM_KEY}"))[1]
            chats = (await client.get("/console/chats"))[1]
    assert "No limits are set (budgets: in config.yaml); spending is counted all the same." in budgets
    assert "no limit" in row_of(budgets, f'data-scope="chat:{DM_KEY}"')  # spent, without a limit
    assert "No cache misses in the last 30 days" in overview
    assert 'class="miss' not in chat and "No cache misses in the requests shown." in chat
    assert "no limit for this chat" in chat
    listed = row_of(chats, f'data-key="{DM_KEY}"')
    assert 'data-misses="0"' in listed and 'data-budget=""' in listed and 'data-people="1"' in listed


async def test_a_chat_whose_cache_writes_were_never_read_says_caching_cost_more(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """One message with a prompt over the cache minimum: its cache write costs more than sending it
    uncached, and nothing read it back. The console says so in words, never "saved $-0.0087"."""
    write_project_notes()
    async with console_gateway(home, emulator, emulator_url) as console:
        console.harness.fake.private_message(FRIEND, "hello")
        await console.harness.settled()
        store = console.harness.gateway.services.runtime.store
        [turn] = await store.usage.by_purpose(DM_KEY)
        async with console_client(console.url) as client:
            await client.login()
            chat = (await client.get(f"/console/chat?key={DM_KEY}"))[1]
            overview = (await client.get("/console/"))[1]
    dearer = turn.cost - turn.uncached_cost
    assert dearer > 0 and turn.usage.cache_write_tokens > 0
    assert f"caching cost {money(dearer)} more" in chat
    assert f"caching cost {money(dearer)} more" in overview  # all time
    assert f"<td class=\"num\">-{money(dearer)}</td>" in chat  # the by-purpose table's "Saved"
    assert "$-" not in chat and "$-" not in overview
