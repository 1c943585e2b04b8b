"""A home used for a long time: what it costs to keep, and whether using it grows with it.

Times the gateway on a fresh home, then seeds it (SQLite by default, ``--postgresql URL`` for an empty
PostgreSQL database) with ``--sessions`` sessions, each with ``--messages`` messages and ``--requests``
provider requests spread over days 45 to 105 ago (so part of them is past
``storage.retention.usage_days``), the inbox rows, cache misses and spending the console benchmark's
seeder writes (``benchmarks.console_data``; its scheduled jobs next run tomorrow, as in a home whose
scheduler kept running), and times the same again on the grown home:

- the gateway's start (``open_gateway`` as ``herald gateway run`` opens it: migrations checked,
  unfinished work found, the console and Telegram up; a restart: the fresh home was started once
  before, and the imports, which no history changes, are not counted) and its first reply to
  ``--turns`` new chats one after another (the fake Telegram Bot API and the provider emulator in this
  process: what a grown home adds to a turn is the difference from the fresh home's);
- every console page over HTTP (``benchmarks.console``'s pages, the median of ``--repeat`` fetches);
- ``herald insights``, ``herald budget`` and ``herald storage prune --dry-run``;

and a real prune of the grown home (which rolls the old requests up into days) before its gateway is
timed: the gateway's own first pass at its start would otherwise compete with what is timed, and a home
in use is pruned every day. Prints the database's bytes per message (SQLite: the file; PostgreSQL: the
database's size).

    python -m benchmarks.growth --sessions 100 --messages 100          # a 10,000-message home
    python -m benchmarks.growth --sessions 10000 --messages 100        # 1,000,000 messages

``--keep DIR`` keeps the grown home in ``DIR`` (made if missing), and a later run with the same ``DIR``
reuses it: no fresh home, no seeding (a million messages take minutes), only the grown home's figures
(its prune then has little left to roll up). To measure a change to the queries over the same history.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import messages, sessions
from benchmarks.console import TOKEN, busiest_chat, timed_pages
from benchmarks.console_data import seed
from gateway.app import open_gateway
from gateway.cli.dispatch import run as herald
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from gateway.home.database import home_config, open_home_storage
from gateway.retention.pruner import Pruner
from gateway.tables import cron_jobs
from tests.emulator import ProviderEmulator
from tests.fakes import FakeTelegram

DAY = 86_400.0
BATCH = 5_000
REPLY_TIMEOUT = 120.0
QUESTION = "What should I pack for three days in the mountains?"
TEXT = "A message of a usual length: a question, a few sentences of answer, a link or two. " * 3


async def add_messages(storage: Storage, per_session: int, now: float) -> int:
    ids = await storage.read(lambda conn: list(conn.execute(sa.select(sessions.c.id)).scalars()))
    rows: list[dict[str, Any]] = []
    total = 0
    for session_id in ids:
        for position in range(per_session):
            role = "user" if position % 2 == 0 else "assistant"
            rows.append(
                {"session_id": session_id, "position": float(position), "role": role, "content": TEXT,
                 "created_at": now - position, "meta": "{}"}
            )  # fmt: skip
            if len(rows) >= BATCH:
                total += await _insert(storage, rows)
                rows = []
    return total + (await _insert(storage, rows) if rows else 0)


async def _insert(storage: Storage, rows: list[dict[str, Any]]) -> int:
    await storage.write(lambda conn: conn.execute(sa.insert(messages), rows))
    return len(rows)


def quiet(*args: str) -> Callable[[], Awaitable[None]]:
    async def command() -> None:
        def call() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                assert herald(list(args)) == 0

        await asyncio.to_thread(call)

    return command


async def timed(what: Callable[[], Awaitable[Any]]) -> float:
    began = time.perf_counter()
    await what()
    return time.perf_counter() - began


async def database_bytes(storage: Storage, home: HeraldHome) -> int:
    if storage.dialect == "sqlite":
        return sum(path.stat().st_size for path in home.root.glob("state.db*"))
    query = sa.text("SELECT pg_database_size(current_database())")
    return int(await storage.read(lambda conn: conn.execute(query).scalar_one()))


async def first_reply(fake: FakeTelegram, user: int) -> float:
    """Seconds from a new chat's first message to the bot's answer reaching Telegram."""
    began = time.perf_counter()
    fake.private_message(user, QUESTION)
    while not fake.messages(user):
        if time.perf_counter() - began > REPLY_TIMEOUT:
            raise TimeoutError(f"no answer in chat {user} within {REPLY_TIMEOUT:g} s")
        await asyncio.sleep(0.002)
    return time.perf_counter() - began


async def gateway_figures(
    home: HeraldHome, args: argparse.Namespace, first_user: int, *, warm_up: bool = False
) -> dict[str, float]:
    """The gateway's start, its first reply to ``args.turns`` new chats (median) and each console page
    (median of ``args.repeat`` fetches), on ``home`` as it is now. ``warm_up``: start it once before
    (a fresh database's first start creates the tables, and the process's first imports the SDKs)."""
    emulator, fake = ProviderEmulator(), FakeTelegram()
    async with emulator.serve() as model_url, fake.serve() as telegram_url:
        config = HeraldConfig.model_validate(
            {
                "storage": {"url": args.postgresql},
                "model": {"base_url": model_url},
                "gateway": {"http_port": 0, "allow_all": True, "stream_edit_interval": 0},
                "telegram": {"base_url": telegram_url},
            }
        )
        environ = {"TELEGRAM_BOT_TOKEN": fake.token, "HERALD_CONSOLE_TOKEN": TOKEN}
        if warm_up:
            async with open_gateway(config, home, environ=environ):
                pass
        began = time.perf_counter()
        async with open_gateway(config, home, environ=environ) as gateway:
            figures = {"gateway start (open_gateway)": time.perf_counter() - began}
            replies = [await first_reply(fake, first_user + n) for n in range(args.turns)]
            figures[f"first reply to a new chat (median of {args.turns})"] = statistics.median(replies)
            chat_path = await busiest_chat(gateway.services.runtime.storage)
            pages = await timed_pages(gateway.http.url, args.repeat, chat_path)
    for name, samples in pages.items():
        figures[f"console: {name}"] = statistics.median(wall for wall, _ in samples) / 1000
    return figures


async def command_figures() -> dict[str, float]:
    return {
        "herald insights": await timed(quiet("insights")),
        "herald budget": await timed(quiet("budget")),
        "herald storage prune --dry-run": await timed(quiet("storage", "prune", "--dry-run")),
    }


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # the SDK's; the emulator takes any
    if args.keep:
        await measure(HeraldHome(args.keep), args)
        return
    with tempfile.TemporaryDirectory(prefix="herald-growth-") as tmp:  # a million messages: ~1 GB
        await measure(HeraldHome(Path(tmp) / "home"), args)


SEEDED = "growth-seeded.json"  # in a kept home: what was seeded, and how many runs timed it


async def measure(home: HeraldHome, args: argparse.Namespace) -> None:
    kept = home.root / SEEDED
    grown_before = json.loads(kept.read_text()) if kept.exists() else None
    if args.keep and grown_before is None and home.root.exists() and any(home.root.iterdir()):
        raise SystemExit(f"{home.root} is not empty and holds no home this benchmark grew (no {SEEDED})")
    ensure_home(home)
    os.environ["HERALD_HOME"] = str(home.root)
    if args.postgresql:
        home.config_path.write_text(f"storage:\n  url: {args.postgresql}\n")
    if grown_before is None:
        fresh = await gateway_figures(home, args, 900_000, warm_up=True) | await command_figures()
        summary = await grow(home, args)
        runs = 0
    else:
        fresh, summary, runs = {}, grown_before["summary"], grown_before["runs"]
    if args.keep:
        kept.write_text(json.dumps({"summary": summary, "runs": runs + 1}))
    grown = {"herald storage prune --dry-run": await timed(quiet("storage", "prune", "--dry-run"))}
    async with open_home_storage(home) as storage:  # first, as every day in a home that is in use
        pruner = Pruner(storage, home_config(home).storage.retention)
        grown["herald storage prune (rolls up old requests)"] = await timed(pruner.prune)
    first_user = 910_000 + 1_000 * runs  # new chats, also in a kept home timed before
    grown |= await gateway_figures(home, args, first_user, warm_up=grown_before is not None)
    grown |= await command_figures()
    print(summary)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"load average {load}\n\n| what | fresh home, s | grown home, s |\n|---|---|---|")
    for what, seconds in grown.items():
        before = f"{fresh[what]:.3f}" if what in fresh else "-"
        print(f"| {what} | {before} | {seconds:.3f} |")


async def grow(home: HeraldHome, args: argparse.Namespace) -> str:
    """Seed ``home`` with ``args``' history; what was seeded, in a sentence."""
    now = time.time()
    async with open_home_storage(home) as storage:
        began = time.perf_counter()
        seeded = await seed(
            storage, sessions_wanted=args.sessions, requests_per_session=args.requests, now=now - 45 * DAY
        )
        count = await add_messages(storage, args.messages, now)
        await storage.write(lambda conn: conn.execute(sa.update(cron_jobs).values(next_run_at=now + DAY)))
        seeding = time.perf_counter() - began
        size = await database_bytes(storage, home)
    kind = "PostgreSQL" if args.postgresql else "SQLite"
    return (
        f"{kind}: {seeded.sessions:,} sessions in {seeded.chats:,} chats, {count:,} messages, "
        f"{seeded.requests:,} requests, {seeded.inbox:,} inbox rows (seeded in {seeding:.0f} s); "
        f"{size / max(count, 1):,.0f} bytes per message (the whole database / messages)"
    )


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100, help="messages per session")
    parser.add_argument("--requests", type=int, default=20, help="provider requests per session")
    parser.add_argument("--turns", type=int, default=5, help="new chats whose first reply is timed")
    parser.add_argument("--repeat", type=int, default=5, help="fetches of each console page")
    parser.add_argument("--postgresql", metavar="URL", help="an empty PostgreSQL database instead of SQLite")
    parser.add_argument(
        "--keep", metavar="DIR", type=lambda path: Path(path).resolve(),
        help="keep the grown home in DIR, or reuse the one kept there",
    )
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
