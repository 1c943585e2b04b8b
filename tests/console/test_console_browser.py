"""The operator console in a real headless browser (Debian's Chromium, driven by Playwright) against a
running gateway: log in, open every page (on a desktop and a phone screen), run a job now, approve a
pairing request, sort the chat list, log in with a link from the bot, a chat over its budget, a cache
miss on a chat's chart. A failing test leaves a screenshot (``tests/browser_support.py``)."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser

from agent.prompt import SystemPrompt
from agent.store import NewSession
from agent.usage import RequestUsage, Usage
from gateway.access.pairing import WELCOME
from gateway.cron.jobs import RunStatus
from gateway.cron.manage import COMMAND_LINE
from gateway.home import HeraldHome
from tests.bots_support import two_bots
from tests.browser_support import DESKTOP, PHONE, Watched, chromium, screenshot_if_failed, watched_page
from tests.console_support import CONSOLE_TOKEN, ConsoleHarness, console_gateway
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import ADMIN, FRIEND, STRANGER
from tests.helpers import write_project_notes

pytestmark = pytest.mark.timeout(120)

XSS = "<img src=x onerror=alert(1)>"
PAGES = {  # nav link -> the page's heading
    "Overview": "Overview",
    "Chats": "Chats",
    "Scheduled jobs": "Scheduled jobs",
    "Pairing": "Pairing requests",
    "Budgets": "Budgets",
    "Health": "Cluster and health",
}


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as opened:
        yield opened


@pytest.fixture
async def tab(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Watched]:
    watched = await watched_page(browser)
    yield watched
    await screenshot_if_failed(request, watched.page)


async def log_in(tab: Watched, console: ConsoleHarness) -> None:
    page = tab.page
    await page.goto(console.url + "/console/chats")  # a page asked for before logging in...
    await page.fill("#token", CONSOLE_TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(console.url + "/console/chats")  # ...is where the login leads
    assert await page.locator("h1").inner_text() == "Chats"
    assert await page.locator("nav.bots").count() == 0  # one bot (no bots:): no switcher


async def test_log_in_and_see_every_page_on_a_desktop_and_a_phone(
    tab: Watched, browser: Browser, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url) as console:
        fake = console.harness.fake
        fake.private_message(FRIEND, "What's the weather?", first_name="Ada")
        fake.group_message(-100, FRIEND, "hello bot", mention_bot=True, title=XSS)
        await console.harness.settled()
        page = tab.page
        await page.goto(console.url + "/console/jobs")
        await page.fill("#token", "a wrong token")
        await page.click("button[type=submit]")
        assert "That is not the console token." in await page.locator(".flash.error").inner_text()
        await log_in(tab, console)

        for link, heading in PAGES.items():
            await page.click(f"header nav >> text={link}")
            assert await page.locator("h1").inner_text() == heading
        await page.click("header nav >> text=Overview")
        assert await page.locator("svg.chart rect.spend").count() == 30  # a bar per day
        await page.click("header nav >> text=Chats")
        cell = page.locator("#chats a.name", has_text=XSS)
        assert await cell.inner_text() == XSS  # the group's title, as text
        await cell.click()
        assert await page.locator("h1").inner_text() == XSS
        assert await page.locator("svg.chart rect").count() >= 2  # the turn's input and output
        assert await page.locator("main img").count() == 0  # no element was made of the title

        phone = await watched_page(browser, PHONE)
        await phone.page.context.add_cookies(await page.context.cookies())  # type: ignore[arg-type]
        for path in ("/console/", "/console/chats", "/console/chat?key=telegram:group:-100", "/console/jobs",
                     "/console/pairing", "/console/budgets", "/console/health"):  # fmt: skip
            await phone.page.goto(console.url + path)
            assert await phone.page.locator("h1").is_visible()
            width = await phone.page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{path} is {width}px wide on a phone"  # tables scroll inside

        await page.click("text=Log out")
        await page.wait_for_url(re.compile(r".*/console/login$"))
    assert tab.dialogs == [] and phone.dialogs == []  # onerror=alert(1) never ran
    assert tab.errors == [] and phone.errors == []


async def test_run_a_job_now(
    tab: Watched, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Sunny all day."))
    async with console_gateway(home, emulator, emulator_url) as console:
        console.harness.fake.register_chat(FRIEND, type="private")
        cron = console.harness.gateway.services.runtime.cron
        target = f"telegram:{FRIEND}"
        job = await cron.create(
            COMMAND_LINE, prompt="Tell the weather", schedule="every 24h", name="Weather", target=target
        )
        await log_in(tab, console)
        page = tab.page
        await page.click("header nav >> text=Scheduled jobs")
        row = page.locator(f'tr[data-job="{job.id}"]')
        assert await row.locator(".last-run").inner_text() == "not run yet"
        await row.locator('button[data-action="run"]').click()
        assert await page.locator(".flash.ok").inner_text() == f'Running now: "Weather" ({job.id}).'
        await console.harness.fake.wait_for(lambda: "Sunny all day." in console.harness.texts(FRIEND), 20)
        await console.harness.settled()
        assert (await cron.jobs.get(job.id)).last_status is RunStatus.OK  # type: ignore[union-attr]
        await page.reload()
        assert "answered, delivery sent" in await row.locator(".last-run").inner_text()

        await row.locator('button[data-action="pause"]').click()
        assert await page.locator(".flash.ok").inner_text() == f'Paused: "Weather" ({job.id}).'
        assert await row.locator(".pill").first.inner_text() == "paused"
        assert await row.locator('button[data-action="run"]').count() == 0
    assert tab.errors == []


async def test_approve_and_deny_pairing_requests(
    tab: Watched, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    other = STRANGER + 1
    async with console_gateway(home, emulator, emulator_url) as console:
        harness = console.harness
        harness.fake.private_message(STRANGER, "let me in", first_name="Eve")
        harness.fake.private_message(other, "me too", first_name="Mallory")
        await harness.settled()
        await log_in(tab, console)
        page = tab.page
        await page.click("header nav >> text=Pairing")
        eve = page.locator("#pending tr", has_text="Eve")
        await eve.locator('button[data-action="approve"]').click()
        assert "Approved Eve (telegram:3)" in await page.locator(".flash.ok").inner_text()
        await harness.fake.wait_for(lambda: harness.texts(STRANGER)[-1] == WELCOME, 15)
        assert await page.locator("#approved tr", has_text="Eve").count() == 1

        mallory = page.locator("#pending tr", has_text="Mallory")
        await mallory.locator('button[data-action="deny"]').click()
        assert "Denied the request of Mallory" in await page.locator(".flash.ok").inner_text()
        assert await page.locator("#pending tr", has_text="Mallory").count() == 0
        await harness.settled()
        assert await harness.gateway.services.pairing.is_approved("telegram", str(STRANGER))
        assert harness.texts(STRANGER).count(WELCOME) == 1  # queued with the approval, said once
        assert not await harness.gateway.services.pairing.is_approved("telegram", str(other))
        assert WELCOME not in harness.texts(other)
    assert tab.errors == []


async def test_sort_the_chat_list(
    tab: Watched, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url) as console:
        store = console.harness.gateway.services.runtime.store
        for number, (cost, requests) in enumerate([(1.0, 3), (3.0, 1), (2.0, 2)]):
            session_id = f"chat-{number}"
            await store.sessions.create(
                NewSession(
                    id=session_id, session_key=f"telegram:dm:{500 + number}", source="telegram",
                    platform="telegram", system_prompt=SystemPrompt("s", "", ""), tools_json="[]",
                    provider="anthropic", model="m", title=f"chat number {number}",
                )
            )  # fmt: skip
            for _ in range(requests):
                usage = RequestUsage("turn", "anthropic", "m", Usage(input_tokens=10), cost / requests, cost)
                await store.usage.record(session_id, usage)
        await log_in(tab, console)
        page = tab.page

        async def spends() -> list[float]:
            cells = page.locator("#chats td[data-spend]")
            count = await cells.count()
            return [float(await cells.nth(i).get_attribute("data-spend") or "") for i in range(count)]

        assert await spends() == [3.0, 2.0, 1.0]  # the most expensive first
        await page.click('th a[data-sort="spend"]')
        assert await spends() == [1.0, 2.0, 3.0]
        assert await page.locator('th[aria-sort="ascending"]').inner_text() == "Spend ▲"
        await page.click('th a[data-sort="requests"]')
        counts = page.locator("#chats td[data-requests]")
        assert [await counts.nth(i).inner_text() for i in range(3)] == ["3", "2", "1"]
        await page.click('th a[data-sort="title"]')
        titles = page.locator("#chats .title")
        assert [await titles.nth(i).inner_text() for i in range(3)] == [f"chat number {n}" for n in range(3)]
    assert tab.errors == []


async def test_the_chat_list_fits_a_desktop_and_a_phone_screen(
    tab: Watched, browser: Browser, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Every column on the screen, nothing to scroll sideways: not the page, not the list's box (at
    1280 px the nine columns share the width and a long name wraps; on a phone each chat is a card)."""
    budgets = {"chat": {"daily_usd": 1}}  # a budget bar in every chat's row
    async with console_gateway(home, emulator, emulator_url, budgets=budgets) as console:
        fake = console.harness.fake
        long_title = f"Offsite_{'planning_' * 8}2026"  # one word, wider than its column
        fake.group_message(-100, FRIEND, "hello bot", mention_bot=True, title=long_title)
        fake.private_message(FRIEND, "What's the weather?", first_name="Ada")
        await console.harness.settled()
        await log_in(tab, console)
        phone = await watched_page(browser, PHONE)
        await phone.page.context.add_cookies(await tab.page.context.cookies())  # type: ignore[arg-type]
        for watched, screen in ((tab, DESKTOP), (phone, PHONE)):
            await watched.page.goto(console.url + "/console/chats")
            assert await watched.page.locator("#chats tbody tr").count() == 2
            page_width, box_width, box_shown = await watched.page.evaluate(
                "[document.documentElement.scrollWidth, document.querySelector('.tablebox').scrollWidth,"
                " document.querySelector('.tablebox').clientWidth]"
            )
            at = f"at {screen['width']}px"
            assert page_width <= screen["width"], f"the page is {page_width}px wide {at}"
            assert box_width <= box_shown, f"the list is {box_width}px wide in its {box_shown}px box {at}"
            spend = watched.page.locator("#chats tbody tr td[data-spend]").first
            assert await spend.is_visible()
        await phone.page.click('th a[data-sort="title"]')  # the sort links are there on a phone too
        assert await phone.page.locator('th[aria-sort="ascending"]').count() == 1
    assert tab.errors == [] and phone.errors == []


async def test_log_in_with_a_link_from_the_bot(
    tab: Watched, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with console_gateway(home, emulator, emulator_url, token=None) as console:
        console.harness.fake.private_message(ADMIN, "/console")
        await console.harness.settled()
        link = re.search(r"http://\S+", console.harness.texts(ADMIN)[-1])
        assert link is not None
        page = tab.page
        await page.goto(link.group(0))
        await page.click("button:has-text('Log in')")
        await page.wait_for_url(console.url + "/console/")
        assert await page.locator("h1").inner_text() == "Overview"
        await page.goto(link.group(0))  # a link works once
        await page.wait_for_url(console.url + "/console/")  # (still logged in: straight through)
        await page.context.clear_cookies()
        await page.goto(link.group(0))
        await page.click("button:has-text('Log in')")
        assert "used already or has expired" in await page.locator(".flash.error").inner_text()
    assert tab.errors == []


async def test_a_chat_over_its_budget_on_the_budgets_page_and_its_own_page(
    tab: Watched, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    more = {f"telegram:{FRIEND}": {"daily_usd": 1}}  # Friend's direct chat may spend more
    budgets = {"chat": {"daily_usd": 0.001}, "exempt_admins": True, "overrides": more}  # admins go on
    async with console_gateway(home, emulator, emulator_url, budgets=budgets) as console:
        fake = console.harness.fake
        fake.group_message(-100, ADMIN, "what is new?", mention_bot=True, title="Ops")
        fake.private_message(FRIEND, "hello")  # a chat under its limit
        await console.harness.settled()
        fake.group_message(-100, FRIEND, "and me?", mention_bot=True, title="Ops")
        await console.harness.settled()
        assert console.harness.texts(-100)[-1].startswith("This chat has used its $0.001 for today")
        await log_in(tab, console)
        page = tab.page
        await page.click("header nav >> text=Budgets")
        over = page.locator('#budgets tr[data-scope="chat:telegram:group:-100"]')
        under = page.locator(f'#budgets tr[data-scope="chat:telegram:dm:{FRIEND}"]')
        day, _ = console.harness.gateway.services.budgets.book.current_windows()
        assert day.end is not None
        midnight = dt.datetime.fromtimestamp(day.end, dt.UTC).strftime("%Y-%m-%d %H:%M")  # tests run in UTC
        assert await over.locator(".stopped").inner_text() == f"at its limit {midnight}"
        assert await over.locator('td[data-window="day"] svg.bar.over').count() == 1
        share = float((await over.locator('td[data-window="day"] .share').inner_text()).rstrip("%"))
        assert share > 100
        assert await under.locator(".stopped").inner_text() == "—"
        rows = await page.locator("#budgets tbody tr").all()
        scopes = [await row.get_attribute("data-scope") for row in rows]
        assert scopes[:2] == ["bot:", "chat:telegram:group:-100"]  # the bot, then the fullest first
        await over.locator("a").click()
        assert await page.locator("h1").inner_text() == "Ops"
        card = page.locator("#budget-card")
        assert await card.locator(".value").inner_text() == f"{share:.1f}%"
        assert "at its limit until" in await card.locator(".note").inner_text()
        await page.click("header nav >> text=Chats")
        await page.click('th a[data-sort="budget"]')
        first = page.locator("#chats tbody tr").first
        assert await first.get_attribute("data-key") == "telegram:group:-100"
        assert (await first.locator("td.budget").inner_text()).strip() == f"{share:.1f}%"
    assert tab.errors == []


async def test_a_cache_miss_is_marked_on_its_chart_with_its_cause_and_chats_sort_by_misses(
    tab: Watched, emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()  # a prompt over the model's cache minimum
    caching = {"cache_ttl": "5m"}
    async with console_gateway(home, emulator, emulator_url, prompt_caching=caching) as console:
        start = time.time()
        console.harness.gateway.services.runtime.agent.clock = lambda: start + emulator.clock.now()
        fake = console.harness.fake
        fake.group_message(-100, FRIEND, "hello all", mention_bot=True, title="Ops")  # no miss here
        for text in ("hello", "and one more"):
            fake.private_message(FRIEND, text, first_name="Ada")
            await console.harness.settled()
            emulator.clock.advance(20)
        emulator.clock.advance(10 * 60)  # a pause past the TTL, on the emulator's clock
        fake.private_message(FRIEND, "back again", first_name="Ada")
        await console.harness.settled()
        store = console.harness.gateway.services.runtime.store
        [miss] = await store.cache_misses.of_chat(f"telegram:dm:{FRIEND}")
        await log_in(tab, console)
        page = tab.page
        await page.click('th a[data-sort="misses"]')
        rows = page.locator("#chats tbody tr")
        assert [await rows.nth(i).get_attribute("data-key") for i in range(2)] == [
            f"telegram:dm:{FRIEND}", "telegram:group:-100"
        ]  # fmt: skip
        assert await rows.first.locator("td[data-misses]").inner_text() == "1"
        await page.click('th a[data-sort="misses"]')  # again: the fewest first
        assert await rows.first.get_attribute("data-key") == "telegram:group:-100"

        await page.click("#chats a.name >> text=Ada")
        marker = page.locator('svg.chart path.miss[data-cause="ttl_expired"]')
        assert await marker.count() == 1
        assert "cache miss (TTL expired)" in (await marker.locator("title").text_content() or "")
        legend = page.locator('.legend.markers span[data-cause="ttl_expired"]')
        assert await legend.inner_text() == "TTL expired"
        bars = page.locator("svg.chart rect.output")  # one per request, oldest first
        paused = await bars.nth(await bars.count() - 1).bounding_box()
        mark = await marker.bounding_box()
        assert paused is not None and mark is not None
        centre = mark["x"] + mark["width"] / 2
        assert abs(centre - (paused["x"] + paused["width"] / 2)) < 1  # on the request after the pause
        assert mark["y"] + mark["height"] <= paused["y"] + 1  # above its bar
        row = page.locator(f'#misses tr[data-request="{miss.request_id}"]')
        assert await row.locator("td.cause").inner_text() == "TTL expired"
        assert f"{miss.missed_tokens:,}" in await row.inner_text()
    assert tab.errors == []


@pytest.mark.slow
async def test_the_bot_switcher_leads_to_the_same_page_of_the_other_bot(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tab: Watched
) -> None:
    """With bots:, every page has the bots' names at the top; a click on another keeps the page."""
    environ = {"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}
    async with two_bots(home, emulator, emulator_url, environ=environ) as harness:
        url, page = harness.gateway.http.url, tab.page
        await page.goto(url + "/console/bots/family/budgets")
        await page.fill("#token", CONSOLE_TOKEN)
        await page.click("button[type=submit]")
        await page.wait_for_url(url + "/console/bots/family/budgets")
        assert await page.locator("nav.bots a[aria-current]").inner_text() == "family"
        await page.click("nav.bots >> text=work")
        await page.wait_for_url(url + "/console/bots/work/budgets")
        assert await page.locator("nav.bots a[aria-current]").inner_text() == "work"
        assert await page.locator("h1").inner_text() == "Budgets" and "work" in await page.title()
        await page.click("header nav:not(.bots) >> text=Overview")  # the page links keep the bot
        await page.wait_for_url(url + "/console/bots/work/")
        assert await page.locator("#bots tr[data-bot]").count() == 2
