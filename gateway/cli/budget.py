"""``herald budget``: every scope's spending today and this month, with its limits.

It reads the database (what every process spent; requests in flight are not counted yet) and the
limits in ``config.yaml``; it changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from agent.api import SpendLedger, zone_name
from gateway.budgets.book import BudgetBook, pairs
from gateway.budgets.lines import limits_summary, table
from gateway.home import HeraldHome
from gateway.home.database import home_config, open_home_storage
from gateway.timezones import resolve_timezone


async def _run(home: HeraldHome) -> int:
    config = home_config(home)
    async with open_home_storage(home, config, pool_size=2) as storage:
        book = BudgetBook(config.budgets, SpendLedger(storage), resolve_timezone(config.scheduler.timezone))
        now = time.time()
        day, month = book.current_windows(now)
        rows = pairs(await book.standing(now))
    today, this_month = day.id.partition(":")[2], month.id.partition(":")[2]
    print(f"Spending in USD, today ({today}) and this month ({this_month}), {zone_name(book.zone)}:")
    print("\n".join(table(rows, book.zone, now)) if rows else "Nothing spent yet today or this month.")
    print(limits_summary(config.budgets))
    return 0


def run_budget_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_run(home))
