"""Gateway benchmark: the whole gateway, offline, through python-telegram-bot and the anthropic SDK.

    python -m benchmarks.gateway                 # every measurement (about 6 minutes on 2 cores)
    python -m benchmarks.gateway --quick         # smaller runs (about 2 minutes)
    python -m benchmarks.gateway --only cache    # one measurement (repeatable)
    python -m benchmarks.gateway --quick --only memory --trace-memory   # what grows, by tracemalloc

The gateway runs in this process (``open_gateway``: Telegram adapter, router, lanes, turns, outbox
sender, HTTP server). For latency, throughput and memory the provider emulator (zero stream delay) and
the fake Telegram Bot API (``benchmarks/fake_telegram.py``) each run in a process of their own; for the
cache measurement both run on this loop, so the emulated clock and the scripted replies are at hand.

- **latency**: one message at a time through the stock gateway, from the moment the update is queued
  at the fake to the gateway's first ``sendMessage``/``editMessageText`` for that chat reaching the
  fake, and to the answer's final operation. Both instants are ``time.monotonic()`` in the fake's
  process. p50/p99.
- **throughput**: 100 chats send 5 messages each at the same moment; answers per second, wall time, a
  check that every message got exactly one answer (the one the model gave to it), where the time went,
  and the connection-pool slots python-telegram-bot's HTTP client leaked.
- **memory**: 10,000 messages across 1,000 chats in waves; the gateway process's RSS as chats appear
  and as messages accumulate, next to its live C heap, SQLite's heap and its Python objects.
- **images**: four people send a 7000×7000 PNG of zeros (a ~200 KB file) at the same moment; the
  gateway process's peak RSS while it reads them, and what stays in use afterwards. Then one such
  image in each format, alone in a fresh process: how it is decoded, the memory estimated before
  and the peak measured.
- **platforms**: latency and throughput as above (stock adapters), on Matrix, Discord and Slack (Socket
  Mode): each platform's fake in a process of its own (``benchmarks/fake_matrix.py``, ``fake_discord.py``,
  ``fake_slack.py``) in place of the fake Telegram (``benchmarks/gateway_platforms.py``).
- **cache**: scripted conversations through the gateway; efficiency = cache read ÷ what an oracle could
  have read (see ``benchmarks/cache.py``), and what a new chat's first request reads.

"Pacing lifted" is :class:`UnpacedTelegramAdapter`: python-telegram-bot's flood limiter off. The
harness is in ``benchmarks/gateway_harness.py``, the memory and cache measurements in
``gateway_memory.py`` and ``gateway_cache.py``; ``--storage postgresql://…`` runs each measurement but the
cache one on a fresh PostgreSQL database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from tempfile import TemporaryDirectory

import sqlalchemy as sa

from benchmarks import gateway_platforms
from benchmarks.concurrency import QUESTION, emulator_process
from benchmarks.fake_telegram import Check, FakeTelegramProcess, Sent
from benchmarks.gateway_cache import cache
from benchmarks.gateway_harness import (
    STORAGE,
    T,
    busy_pool_slots,
    fresh_home,
    fresh_state,
    ms,
    operations_sent,
    percentile,
    poll,
    process_config,
    running_gateway,
    settle,
    table,
    use_storage,
)
from benchmarks.gateway_memory import (
    DECODE_COLUMNS,
    IMAGE_COLUMNS,
    MEMORY_COLUMNS,
    decode_costs,
    images,
    memory,
)
from benchmarks.storage import describe
from gateway.config import HeraldConfig
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.tables import inbox, outbox

# --- latency ---------------------------------------------------------------------------------------

LATENCY_CHATS = [101, 102, 103, 104]
LATENCY_SPACING = 0.1  # at most 10 messages/s: ≤ 20 paced calls/s, under Telegram's 30, so PTB never waits
LATENCY_COLUMNS = [
    "gateway.stream_edit_interval", "messages", "answered once", "typing p50", "first send p50",
    "first send p99", "answer complete p50", "answer complete p99",
]  # fmt: skip


async def latency(messages: int, interval: float) -> list[str]:
    """``messages`` direct messages one at a time over a few chats, through the stock gateway."""
    chats = LATENCY_CHATS
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, FakeTelegramProcess() as fake:
        config = process_config(url, fake.base_url, chats, interval=interval)
        async with running_gateway(config, fresh_home(tmp), fake.token) as gateway:
            sent: list[Sent] = []
            for number in range(len(chats) + messages):  # each chat's first message is a warm-up
                chat = chats[number % len(chats)]
                started = time.monotonic()
                done = operations_sent(gateway) + 1
                [message] = await fake.inject([(chat, f"c{chat}m{number}", QUESTION)])
                await poll(lambda: operations_sent(gateway) >= done)  # noqa: B023 - awaited here
                if number >= len(chats):
                    sent.append(message)
                await asyncio.sleep(max(0.0, started + LATENCY_SPACING - time.monotonic()))
            await settle(gateway, len(chats) + messages)
            answers, typing = await fake.answers(chats)
    check = Check.of(sent, answers)
    first = [check.first[m] - m.at for m in check.first]
    final = [check.final[m] - m.at for m in check.final]
    typed = [min(t for t in typing[m.chat] if t >= m.at) - m.at for m in sent]
    mode = f"{interval:g} s (streams)" if interval else "0 (one message at the end)"
    return [
        mode, str(len(sent)), check.line(), ms(percentile(typed, 50)), ms(percentile(first, 50)),
        ms(percentile(first, 99)), ms(percentile(final, 50)), ms(percentile(final, 99)),
    ]  # fmt: skip


# --- throughput ------------------------------------------------------------------------------------

THROUGHPUT_COLUMNS = [
    "Telegram pacing", "stream interval", "messages", "answered once", "wall", "answers/s",
    "answer complete p50", "answer complete p99", "PTB pool slots leaked",
]  # fmt: skip
STAGE_COLUMNS = [
    "Telegram pacing", "stream interval", "waiting to be stored p50", "waiting to be stored max",
    "turn p50", "turn p99", "outbox queue p50", "outbox queue p99",
]  # fmt: skip


async def stages(
    home: HeraldHome, config: HeraldConfig, sent: list[Sent]
) -> tuple[list[float], list[float], list[float]]:
    """Per message, from the database: injection → stored in the inbox, stored → answer queued, queued
    → sent. The gateway stores wall-clock times; ``time.time() - time.monotonic()`` converts them to
    the system-wide monotonic clock the fake's process stamped the injection with."""
    offset = time.time() - time.monotonic()
    injected = {(str(m.chat), str(m.message_id)): m.at for m in sent}
    query = (
        sa.select(
            inbox.c.chat_id,
            inbox.c.message_id,
            inbox.c.received_at,
            inbox.c.finished_at,
            sa.func.min(outbox.c.created_at),
            sa.func.max(outbox.c.sent_at),
        )
        .join(outbox, outbox.c.inbox_id == inbox.c.id)
        .group_by(inbox.c.id)
    )
    async with open_home_storage(home, config) as storage:
        rows = await storage.read(lambda conn: [tuple(row) for row in conn.execute(query)])
    stored = [received - offset - injected[(chat, message)] for chat, message, received, *_ in rows]
    turn = [finished - received for _, _, received, finished, _, _ in rows]
    queue = [sent_at - created for *_, created, sent_at in rows]
    return stored, turn, queue


async def throughput(
    chats: int, per_chat: int, *, paced: bool, interval: float
) -> tuple[list[str], list[str]]:
    """``chats`` × ``per_chat`` messages injected at once (round-robin over chats), stock adapter."""
    users = [1000 + n for n in range(chats)]
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, FakeTelegramProcess() as fake:
        home = fresh_home(tmp)
        config = process_config(url, fake.base_url, users, interval=interval)
        async with running_gateway(config, home, fake.token, paced=paced) as gateway:
            sent = await fake.inject([(u, f"c{u}m{n}", QUESTION) for n in range(per_chat) for u in users])
            await settle(gateway, len(sent))
            leaked = busy_pool_slots(gateway)
            answers, _ = await fake.answers(users)
        stored, turn, queue = await stages(home, config, sent)
    check = Check.of(sent, answers)
    wall = max(check.final.values()) - min(m.at for m in sent)
    complete = [check.final[m] - m.at for m in check.final]
    pacing = "PTB AIORateLimiter (30/s)" if paced else "lifted"
    row = [
        pacing, f"{interval:g} s", str(len(sent)), check.line(), f"{wall:.2f} s", f"{check.once / wall:.1f}",
        ms(percentile(complete, 50)), ms(percentile(complete, 99)), "n/a" if leaked is None else str(leaked),
    ]  # fmt: skip
    stage_row = [
        pacing, f"{interval:g} s", ms(percentile(stored, 50)), ms(max(stored)), ms(percentile(turn, 50)),
        ms(percentile(turn, 99)), ms(percentile(queue, 50)), ms(percentile(queue, 99)),
    ]  # fmt: skip
    return row, stage_row


# --- main ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    latency_messages: int
    chats: int
    per_chat: int
    memory_chats: int
    memory_messages: int
    wave: int
    turns: int


FULL = Size(300, 100, 5, 1000, 10_000, 250, 30)
QUICK = Size(60, 100, 2, 200, 2_000, 50, 10)
SECTIONS = ("latency", "throughput", "platforms", "memory", "images", "cache")


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    print(f"## {title}\n", flush=True)
    started = time.monotonic()
    yield
    print(f"\n({title}: {time.monotonic() - started:.0f} s)\n", flush=True)


async def fresh(run: Awaitable[T]) -> T:
    """``run`` with a fresh database of its own (``--storage``)."""
    async with fresh_state():
        return await run


async def main_async(size: Size, only: list[str], *, trace: bool) -> None:
    print(f"State: {describe(STORAGE[0])}")
    if "latency" in only:
        with section("Latency, one message at a time"):
            rows = [await fresh(latency(size.latency_messages, interval)) for interval in (1.0, 0.0)]
            print(table(LATENCY_COLUMNS, rows))
    if "throughput" in only:
        with section(f"Throughput, {size.chats} chats × {size.per_chat} messages at once"):
            results = [
                await fresh(throughput(size.chats, size.per_chat, paced=paced, interval=interval))
                for paced, interval in ((True, 1.0), (True, 0.0), (False, 1.0), (False, 0.0))
            ]
            print(table(THROUGHPUT_COLUMNS, [row for row, _ in results]))
            print("\nWhere the time goes:\n\n" + table(STAGE_COLUMNS, [stage for _, stage in results]))
    if "memory" in only:
        title = f"Memory, {size.memory_messages:,} messages across {size.memory_chats:,} chats"
        with section(title):
            run = await fresh(memory(size.memory_chats, size.memory_messages, size.wave, trace=trace))
            print(table(MEMORY_COLUMNS, run.rows))
            print("\n" + run.summary)
            if run.traces:
                print("\n" + run.traces)
    if "images" in only:
        with section("Huge images at once"):
            print(table(IMAGE_COLUMNS, [await fresh(images(4, 7000))]))
            print("\nOne image alone, each in a fresh process:\n\n" + table(DECODE_COLUMNS, decode_costs()))
    if "platforms" in only:
        names = list(gateway_platforms.PLATFORMS)
        listed = ", ".join(names)
        with section(f"{listed}: latency, one message at a time"):
            rows = [
                await fresh(gateway_platforms.latency(name, size.latency_messages, interval))
                for name in names
                for interval in (1.0, 0.0)
            ]
            print(table(gateway_platforms.LATENCY_COLUMNS, rows))
        title = f"{listed}: throughput, {size.chats} chats × {size.per_chat} messages at once"
        with section(title):
            rows = [
                await fresh(gateway_platforms.throughput(name, size.chats, size.per_chat, interval=interval))
                for name in names
                for interval in (1.0, 0.0)
            ]
            print(table(gateway_platforms.THROUGHPUT_COLUMNS, rows))
    if "cache" in only:
        with section("Prompt cache through the gateway"):
            main, firsts, lost = await cache(size.turns)
            print(main + "\n\nFirst request of each chat (8 DM chats interleaved):\n\n" + firsts)
            print("\nRequests below the oracle:\n" + ("\n".join(lost) if lost else "  none"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only these measurements")
    parser.add_argument(
        "--trace-memory", action="store_true", help="tracemalloc during the memory run (slower, more RSS)"
    )
    parser.add_argument("--verbose", action="store_true", help="show the gateway's warnings")
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="postgresql://USER@HOST:PORT/DB: keep each run's state in a fresh database on that server "
        "(default: SQLite); the cache section always uses SQLite (its figures are token counts)",
    )
    args = parser.parse_args()
    use_storage(args.storage)
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    level = logging.WARNING if args.verbose else logging.ERROR
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    size = QUICK if args.quick else FULL
    only = args.only or list(SECTIONS)
    asyncio.run(main_async(size, only, trace=args.trace_memory))


if __name__ == "__main__":
    main()
