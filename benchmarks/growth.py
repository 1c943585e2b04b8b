"""A home used for a long time: what it costs to keep, and whether reading it grows with it.

Seeds a home (SQLite by default, ``--postgresql URL`` for an empty PostgreSQL database) with
``--sessions`` sessions, each with ``--messages`` messages and ``--requests`` provider requests spread
over days 45 to 105 ago (so part of them is past ``storage.retention.usage_days``), the inbox rows, cache
misses and spending the console benchmark's seeder writes (``benchmarks.console_data``); then times what
reads the whole history: ``herald insights``, ``herald budget``, the console's overview and first chat
page, ``herald storage prune --dry-run`` and a real prune (which rolls the old requests up into days).
Prints the database's bytes per message (SQLite: the file; PostgreSQL: the database's size).

    python -m benchmarks.growth --sessions 100 --messages 100          # a 10,000-message home
    python -m benchmarks.growth --sessions 10000 --messages 100        # 1,000,000 messages
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import io
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from agent.api import SessionStore, SpendLedger
from agent.db.base import Storage
from agent.db.schema import messages, sessions
from benchmarks.console_data import seed
from gateway.budgets.book import BudgetBook
from gateway.cli.dispatch import run as herald
from gateway.config import BudgetSettings
from gateway.console.reports import ChatSort, Reports
from gateway.home import HeraldHome, ensure_home
from gateway.home.database import home_config, open_home_storage
from gateway.retention.pruner import Pruner

DAY = 86_400.0
BATCH = 5_000
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


async def main(args: argparse.Namespace) -> None:
    home = HeraldHome(Path(tempfile.mkdtemp(prefix="herald-growth-")) / "home")
    ensure_home(home)
    os.environ["HERALD_HOME"] = str(home.root)
    if args.postgresql:
        home.config_path.write_text(f"storage:\n  url: {args.postgresql}\n")
    now = time.time()
    async with open_home_storage(home) as storage:
        began = time.perf_counter()
        seeded = await seed(
            storage, sessions_wanted=args.sessions, requests_per_session=args.requests, now=now - 45 * DAY
        )
        count = await add_messages(storage, args.messages, now)
        seeding = time.perf_counter() - began
        size = await database_bytes(storage, home)
        book = BudgetBook(BudgetSettings(), SpendLedger(storage), dt.UTC)
        reports = Reports(storage, SessionStore(storage), dt.UTC, book)
        overview = await timed(lambda: reports.overview(time.time()))
        page = await timed(lambda: reports.chats(ChatSort.SPEND, True, 1))
    figures = {
        "herald insights": await timed(quiet("insights")),
        "herald budget": await timed(quiet("budget")),
        "console overview": overview,
        "console chat list (first page)": page,
        "herald storage prune --dry-run": await timed(quiet("storage", "prune", "--dry-run")),
    }
    async with open_home_storage(home) as storage:
        pruner = Pruner(storage, home_config(home).storage.retention)
        figures["herald storage prune (rolls up old requests)"] = await timed(pruner.prune)
    kind = "PostgreSQL" if args.postgresql else "SQLite"
    print(
        f"{kind}: {seeded.sessions:,} sessions in {seeded.chats:,} chats, {count:,} messages, "
        f"{seeded.requests:,} requests, {seeded.inbox:,} inbox rows (seeded in {seeding:.0f} s); "
        f"{size / max(count, 1):,.0f} bytes per message (the whole database / messages)"
    )
    print("| what | seconds |\n|---|---|")
    for what, seconds in figures.items():
        print(f"| {what} | {seconds:.3f} |")


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100, help="messages per session")
    parser.add_argument("--requests", type=int, default=20, help="provider requests per session")
    parser.add_argument("--postgresql", metavar="URL", help="an empty PostgreSQL database instead of SQLite")
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
