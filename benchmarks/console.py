"""The operator console with a busy bot's history: how long each page takes to answer.

A fresh home whose database holds ``--sessions`` sessions (default 10,000) of ~5,000 chats, each with
``--requests`` provider requests (default 20: 200,000 in all) over 60 days, their inbox rows, a
cache-miss event on one request in 30 and what every scope spent today and this month
(``benchmarks.console_data``), with spend limits for the bot, each chat, each person and a few
overrides. A gateway is started on it as ``herald gateway run`` does (the fake
Telegram Bot API in this process), the console is logged into with a token, and each page is fetched
``--repeat`` times over HTTP, one at a time (the overview's first view once: it reads the 30 days,
later views only today): the time is the whole answer (queries, rendering, transfer). The goal is
under 300 ms for every page. Beside the wall time, the process's CPU time per fetch (every thread: the
database thread's queries, rendering, the client) is what a page costs whatever else the machine runs;
the load average is printed with the table.

``--screenshots DIR`` also saves each page as Chromium shows it on a desktop and a phone screen
(``overview-desktop.png`` is docs/console.md's picture).

    python -m benchmarks.console [--sessions 10000] [--storage postgresql://USER@HOST:PORT/DB]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import aiohttp
import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.schema import sessions
from agent.db.urls import parse_storage_url
from benchmarks.console_data import seed
from benchmarks.storage import describe, run_storage
from gateway.app import open_gateway
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from tests.fakes import FakeTelegram

TOKEN = "benchmark-console-token-0123456789"
ZONE = ZoneInfo("Europe/Berlin")
BUDGETS = {  # every chat compared with its limits in the chat list's query, overrides included
    "bot": {"daily_usd": 500.0},
    "chat": {"daily_usd": 2.0, "monthly_usd": 20.0},
    "person": {"monthly_usd": 10.0},
    "cron": {"per_run_usd": 0.25},
    "overrides": {f"telegram:{-1_000_000 - n}": {"daily_usd": 5.0} for n in range(0, 200, 10)},
}
PAGES = {
    "overview, first view (30 days read)": "/console/",  # fetched once: later views read only today
    "overview": "/console/",
    "chats (by spend)": "/console/chats",
    "chats (by hit ratio, page 50)": "/console/chats?sort=hit&order=asc&page=50",
    "chats (by title)": "/console/chats?sort=title&order=asc",
    "chats (by cache misses)": "/console/chats?sort=misses",
    "chats (by budget used)": "/console/chats?sort=budget",
    "chats (by people)": "/console/chats?sort=people",
    "one chat": None,  # the chat with the most requests, found at run time
    "scheduled jobs": "/console/jobs",
    "pairing": "/console/pairing",
    "budgets": "/console/budgets",
    "health": "/console/health",
}


Samples = dict[str, list[tuple[float, float]]]  # page -> (wall ms, CPU ms) per fetch
_BUSIEST = (
    sa.select(sessions.c.session_key)
    .group_by(sessions.c.session_key)
    .order_by(sa.func.sum(sessions.c.request_count).desc(), sessions.c.session_key)
    .limit(1)
)


async def busiest_chat(storage: Storage) -> str:
    """The console's path of the chat with the most requests."""
    key = await storage.read(lambda conn: conn.execute(_BUSIEST).scalar_one())
    return f"/console/chat?key={key}"


async def timed_pages(url: str, repeat: int, chat_path: str) -> Samples:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=60)) as client:
        async with client.get(f"{url}/console/login") as response:
            csrf = re.search(r'name="csrf" value="([^"]+)"', await response.text())
        assert csrf is not None
        form = {"csrf": csrf.group(1), "token": TOKEN}
        async with client.post(f"{url}/console/login", data=form, allow_redirects=False) as response:
            assert response.status == 303, response.status
        times: Samples = {}
        for name, path in PAGES.items():
            target = f"{url}{path or chat_path}"
            for _ in range(1 if name.startswith("overview, first") else repeat):
                started, cpu = time.perf_counter(), time.process_time()
                async with client.get(target, allow_redirects=False) as response:
                    await response.read()
                    assert response.status == 200, (name, response.status)
                wall_ms, cpu_ms = (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000
                times.setdefault(name, []).append((wall_ms, cpu_ms))
        return times


async def screenshots(url: str, directory: Path, chat_path: str) -> None:
    from playwright.async_api import async_playwright

    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    pages = {
        "overview": "/console/", "chats": "/console/chats", "chat": chat_path, "jobs": "/console/jobs",
        "pairing": "/console/pairing", "budgets": "/console/budgets", "health": "/console/health",
    }  # fmt: skip
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for screen, size in (("desktop", (1280, 900)), ("phone", (390, 844))):
            context = await browser.new_context(viewport={"width": size[0], "height": size[1]})
            page = await context.new_page()
            await page.goto(f"{url}/console/login")
            await page.fill("#token", TOKEN)
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{url}/console/")
            for name, path in pages.items():
                await page.goto(url + path)
                shot = directory / f"{name}-{screen}.png"
                await page.screenshot(path=str(shot), full_page=screen == "desktop")
        await browser.close()


async def run(args: argparse.Namespace) -> None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # no model request is made
    with tempfile.TemporaryDirectory() as tmp:
        home = HeraldHome(Path(tmp) / "home")
        ensure_home(home)
        async with run_storage(args.storage) as storage_section:
            url = parse_storage_url(storage_section.get("url"), home.db_path)
            async with open_storage(url) as storage:
                started = time.time()
                seeded = await seed(
                    storage, sessions_wanted=args.sessions, requests_per_session=args.requests, now=started,
                    zone=ZONE,
                )  # fmt: skip
                seconds = time.time() - started
            print(
                f"{describe(args.storage)}: {seeded.sessions:,} sessions in {seeded.chats:,} chats, "
                f"{seeded.requests:,} requests, {seeded.inbox:,} inbox rows, {seeded.misses:,} cache misses, "
                f"{seeded.spend_windows:,} spending windows (seeded in {seconds:.1f} s)"
            )
            fake = FakeTelegram()
            async with fake.serve() as base_url:
                config = HeraldConfig.model_validate(
                    {
                        "storage": storage_section,
                        "gateway": {"http_port": 0},
                        "telegram": {"base_url": base_url},
                        "scheduler": {"timezone": str(ZONE)},
                        "budgets": BUDGETS,
                    }
                )
                environ = {"TELEGRAM_BOT_TOKEN": fake.token, "HERALD_CONSOLE_TOKEN": TOKEN}
                async with open_gateway(config, home, environ=environ) as gateway:
                    chat_path = await busiest_chat(gateway.services.runtime.storage)
                    times = await timed_pages(gateway.http.url, args.repeat, chat_path)
                    if args.screenshots:
                        await screenshots(gateway.http.url, Path(args.screenshots), chat_path)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\n{args.repeat} fetches per page, one at a time, in ms (load average {load}):\n")
    print("| page | wall p50 | wall p95 | CPU p50 | CPU max |")
    print("|---|---|---|---|---|")
    for name, samples in times.items():
        wall = sorted(w for w, _ in samples)
        cpu = sorted(c for _, c in samples)
        p95 = wall[min(len(wall) - 1, round(0.95 * (len(wall) - 1)))]
        figures = (statistics.median(wall), p95, statistics.median(cpu), max(cpu))
        print(f"| {name} | " + " | ".join(f"{value:.1f}" for value in figures) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions to seed (default 10,000)")
    parser.add_argument("--requests", type=int, default=20, help="requests per session (default 20)")
    parser.add_argument("--repeat", type=int, default=20, help="fetches of each page (default 20)")
    parser.add_argument("--storage", metavar="URL", help="a PostgreSQL server (default: SQLite in the home)")
    parser.add_argument("--screenshots", metavar="DIR", help="also save each page as Chromium shows it")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
