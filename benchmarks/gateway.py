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
- **cache**: scripted conversations through the gateway; efficiency = cache read ÷ what an oracle could
  have read (see ``benchmarks/cache.py``), and what a new chat's first request reads.

"Pacing lifted" is :class:`UnpacedTelegramAdapter`: python-telegram-bot's flood limiter off.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import math
import os
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, TypeVar
from unittest import mock

import sqlalchemy as sa
from telegram.ext import AIORateLimiter

import adapters.telegram.adapter as telegram_adapter
from adapters.telegram import TelegramAdapter
from adapters.telegram.ratelimit import BoundedRateLimiter
from agent.prompt import SystemPrompt
from agent.storage.schema import inbox, outbox
from benchmarks.cache import USER_TEXT, VARIANTS, Bench, Result, format_rows, run_scenario
from benchmarks.concurrency import QUESTION, emulator_process
from benchmarks.fake_telegram import Check, FakeTelegramProcess, Sent, rss_kb
from benchmarks.storage import describe, run_storage
from gateway.app import Gateway, open_gateway
from gateway.config import GatewaySettings, HeraldConfig, TelegramSettings
from gateway.home import HeraldHome, ensure_home
from gateway.storage import open_home_storage
from tests.emulator import RecordedRequest, Reply, ToolUse
from tests.emulator.blocks import anthropic_layout
from tests.fakes import FakeTelegram
from tests.gateway_support import Harness

SETTLE_TIMEOUT = 600.0
POLL = 0.005


# --- the gateway ----------------------------------------------------------------------------------


class _UnpacedLimiter(BoundedRateLimiter):
    """:class:`BoundedRateLimiter` with AIORateLimiter's overall and per-group rates switched off."""

    def __init__(self, *, max_retries: int, max_wait: float) -> None:
        AIORateLimiter.__init__(self, overall_max_rate=0, group_max_rate=0, max_retries=max_retries)
        self.max_wait = max_wait


class UnpacedTelegramAdapter(TelegramAdapter):
    """The Telegram adapter without python-telegram-bot's flood pacing (30 sends/s per bot, 20 per
    minute per group): what the gateway itself can do, and emulated time between a group's turns that
    real-time limits do not stretch."""

    def _build_bot(self) -> Any:
        with mock.patch.object(telegram_adapter, "BoundedRateLimiter", _UnpacedLimiter):
            return super()._build_bot()


T = TypeVar("T")
STORAGE: str | None = None  # --storage: set once by main() before any run
STORAGE_URL: ContextVar[str | None] = ContextVar("STORAGE_URL", default=None)  # this run's database


def process_config(emulator_url: str, base_url: str, users: list[int], *, interval: float) -> HeraldConfig:
    """Defaults, the chats' users on the allowlist, streaming every ``interval`` seconds, the state where
    ``--storage`` says (a fresh database per run: ``fresh_state``)."""
    return HeraldConfig.model_validate(
        {
            "storage": {"url": STORAGE_URL.get()},
            "model": {"base_url": emulator_url},
            "gateway": {"http_port": 0, "stream_edit_interval": interval},
            "telegram": {"base_url": base_url, "allowed_users": [str(user) for user in users]},
        }
    )


@asynccontextmanager
async def running_gateway(
    config: HeraldConfig, home: HeraldHome, token: str, *, paced: bool = True
) -> AsyncIterator[Gateway]:
    """``open_gateway`` exactly as ``herald gateway run`` does it, or with :class:`UnpacedTelegramAdapter`."""
    if paced:
        opened = open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": token})
    else:
        adapter = UnpacedTelegramAdapter(token, base_url=config.telegram.base_url)
        opened = open_gateway(config, home, adapters=lambda _storage: [adapter])
    async with opened as gateway:
        yield gateway


def total(metric: Any, **labels: str) -> int:
    """The sum of a prometheus counter's ``_total`` samples over the labels matching ``labels``."""
    return int(
        sum(
            sample.value
            for family in metric.collect()
            for sample in family.samples
            if sample.name.endswith("_total") and labels.items() <= sample.labels.items()
        )
    )


def operations_sent(gateway: Gateway) -> int:
    """Outbox operations the platform accepted (an answer that fits one message is one operation)."""
    return total(gateway.services.metrics.messages_out)


def turns_finished(gateway: Gateway) -> int:
    return total(gateway.services.metrics.turns)


def busy_pool_slots(gateway: Gateway) -> int | None:
    """Requests python-telegram-bot's HTTP connection pool counts as active. Read while the gateway is
    idle, each one is a leaked slot. A diagnostic: it reaches into PTB's, httpx's and httpcore's
    private attributes (None if they moved)."""
    adapter: Any = gateway.adapters[0]
    try:
        return len(adapter._bot._request[1]._client._transport._pool._requests)
    except (AttributeError, IndexError, TypeError):
        return None


async def poll(predicate: Callable[[], bool], interval: float = POLL) -> None:
    while True:
        if predicate():
            return
        await asyncio.sleep(interval)


async def settle(gateway: Gateway, turns: int, timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: ASYNC109
    """Wait until ``turns`` turns finished and every reply was sent."""
    services = gateway.services
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (
            turns_finished(gateway) >= turns
            and services.lanes.depth == 0
            and await services.outbox.pending_count() == 0
        ):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the gateway did not answer {turns} messages in {timeout:.0f}s")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in 0..100."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered), math.ceil(q / 100 * len(ordered))) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fresh_home(tmp: str) -> HeraldHome:
    home = HeraldHome(Path(tmp) / "home")
    ensure_home(home)
    return home


@asynccontextmanager
async def fresh_state() -> AsyncIterator[None]:
    """A fresh database for one run where ``--storage`` points (nothing to do for SQLite: each run has a
    home of its own); ``process_config`` picks it up."""
    async with run_storage(STORAGE) as section:
        token = STORAGE_URL.set(section.get("url"))
        try:
            yield
        finally:
            STORAGE_URL.reset(token)


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


# --- memory ----------------------------------------------------------------------------------------

MEMORY_COLUMNS = [
    "messages answered", "chats seen", "gateway RSS", "vs start", "malloc in use", "of which SQLite",
    "Python objects (gc)", "PTB pool slots busy when idle", "elapsed",
]  # fmt: skip
WAVE_TIMEOUT = 120.0


def mib(kb: float) -> str:
    return f"{kb / 1024:.1f} MiB"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]  # fmt: skip


def malloc_in_use_kb() -> int | None:
    """Bytes the C allocator has handed out and not got back (glibc's ``mallinfo2``): live C-heap data,
    without the free memory an allocator keeps. None where it is not glibc 2.33+."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd) // 1024


def sqlite_heap_kb() -> int | None:
    """``sqlite3_memory_used()`` of the libsqlite3 this process loaded (None where it is linked in)."""
    name = ctypes.util.find_library("sqlite3")
    if name is None:
        return None
    library = ctypes.CDLL(name)
    library.sqlite3_memory_used.restype = ctypes.c_int64
    return int(library.sqlite3_memory_used()) // 1024


def checkpoints(chats: int, total: int) -> list[int]:
    early = [chats // 4, chats // 2, chats]
    return sorted({*early, *range(2 * chats, total + 1, 2 * chats), total})


@dataclass
class MemoryRun:
    rows: list[list[str]]
    summary: str
    traces: str


async def memory(chats: int, total: int, wave: int, *, trace: bool) -> MemoryRun:
    """``total`` messages, message k to chat k mod ``chats``, ``wave`` at a time; RSS at checkpoints."""
    users = [10_000 + n for n in range(chats)]
    marks = checkpoints(chats, total)
    rss: dict[int, int] = {}
    snapshots: dict[int, tracemalloc.Snapshot] = {}
    rows: list[list[str]] = []
    stopped = ""
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, FakeTelegramProcess() as fake:
        home = fresh_home(tmp)
        config = process_config(url, fake.base_url, users, interval=1.0)
        if trace:
            tracemalloc.start(8)
        async with running_gateway(config, home, fake.token, paced=False) as gateway:
            started = time.monotonic()

            def measure(done: int) -> None:
                gc.collect()
                rss[done] = rss_kb()
                if trace:
                    snapshots[done] = tracemalloc.take_snapshot()
                delta = f"{(rss[done] - rss[0]) / 1024:+.1f} MiB" if done else ""
                busy = busy_pool_slots(gateway)
                heaps = [malloc_in_use_kb(), sqlite_heap_kb()]
                rows.append(
                    [f"{done:,}", f"{min(done, chats):,}", mib(rss[done]), delta,
                     *("n/a" if heap is None else mib(heap) for heap in heaps), f"{len(gc.get_objects()):,}",
                     str(busy), f"{time.monotonic() - started:.0f} s"]
                )  # fmt: skip

            measure(0)
            done = 0
            while done < total:
                size = min(wave, total - done, next(m for m in marks if m > done) - done)
                batch = [(users[k % chats], f"c{users[k % chats]}m{k}", "hello, how are things?")
                         for k in range(done, done + size)]  # fmt: skip
                await fake.inject_quietly(batch)  # the records stay in the fake's process
                try:
                    await settle(gateway, done + size, WAVE_TIMEOUT)
                except TimeoutError:
                    stopped = (
                        f"stopped: messages {done:,}–{done + size:,} were not all answered within "
                        f"{WAVE_TIMEOUT:.0f} s; PTB pool slots busy: {busy_pool_slots(gateway)}"
                    )
                    break
                done += size
                if done in marks:
                    measure(done)
            db_size = sum(f.stat().st_size for f in home.db_path.parent.glob(home.db_path.name + "*"))
            once, expected, problems = await fake.check(users)
            fake_rss = await fake.rss_kb()
            if stopped:
                gateway.services.settings = gateway.services.settings.model_copy(
                    update={"drain_timeout": 1.0}
                )
        if trace:
            tracemalloc.stop()
    summary = f"answered exactly once: {once}/{expected}"
    if stopped:
        return MemoryRun(rows, f"{summary}; {stopped}", "")
    per_chat = (rss[chats] - rss[chats // 4]) / (chats - chats // 4)
    after = [m for m in marks if m >= 2 * chats]
    per_k = (rss[after[-1]] - rss[after[0]]) / ((after[-1] - after[0]) / 1000) if len(after) > 1 else 0.0
    summary += (
        f"; RSS per new chat ({chats // 4:,}→{chats:,} chats): {per_chat:.1f} KiB; per 1,000 messages "
        f"once every chat exists ({after[0]:,}→{after[-1]:,}): {per_k:.0f} KiB; state.db on disk: "
        f"{mib(db_size / 1024)}; the fake Telegram process (not counted): {mib(fake_rss)}"
    )
    if problems:
        summary += "\nproblems: " + "; ".join(problems)
    traces = ""
    if trace:
        summary += "\n(RSS above includes tracemalloc's own bookkeeping: read the traced growth below)"
        traces = "\n\n".join(
            [
                growth(snapshots[chats // 4], snapshots[chats], f"{chats // 4:,} → {chats:,} chats"),
                growth(snapshots[after[0]], snapshots[after[-1]], f"{after[0]:,} → {after[-1]:,} messages"),
            ]
        )
    return MemoryRun(rows, summary, traces)


def growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, label: str, top: int = 12) -> str:
    """The allocation sites that grew most between two snapshots (tracemalloc)."""
    stats = after.compare_to(before, "traceback")
    grown = sum(s.size_diff for s in stats)
    lines = [f"tracemalloc, {label}: {grown / 1024:+.0f} KiB traced in all; largest growth:"]
    for stat in stats[:top]:
        frames = [f for f in stat.traceback if "tracemalloc" not in f.filename]
        where = " ← ".join(f"{_short(f.filename)}:{f.lineno}" for f in reversed(frames[-4:]))
        lines.append(f"  {stat.size_diff / 1024:+8.1f} KiB {stat.count_diff:+7d} blocks  {where}")
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", "/wt-gateway-bench/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


# --- cache -----------------------------------------------------------------------------------------

DM_USERS = [201, 202, 203, 204, 205, 206, 207, 208]
GROUP = -1001
SPEAKERS = [(301, "Ada"), (302, "Bob"), (303, "Cy")]


@dataclass
class Notes:
    """What a scenario saw besides the emulator's log: each DM session's prompt, by chat."""

    prompts: dict[int, SystemPrompt] = field(default_factory=dict)


class GatewayBench:
    """A gateway on the bench's home and emulator, Telegram faked on this loop; one turn = one message
    answered and delivered, then 20 s on the emulated clock."""

    def __init__(self, bench: Bench, fake: FakeTelegram, gateway: Gateway) -> None:
        self.bench, self.fake, self.gateway = bench, fake, gateway
        self.harness = Harness(gateway, fake, bench.emulator)

    async def turn(self, chat: int, number: int, speaker: tuple[int, str] | None = None) -> None:
        emulator = self.bench.emulator
        if number % 4 == 3:  # a tool call every 4th turn, as in benchmarks/cache.py
            todos = [{"id": str(number), "content": f"check item {number}", "status": "pending"}]
            emulator.script(
                Reply(tool_calls=[ToolUse("todo", {"todos": todos, "merge": True})]), Reply(text_tokens=180)
            )
        else:
            emulator.script(Reply(text_tokens=250))
        text = f"Chat {chat}, turn {number}: {USER_TEXT}"  # people write different things
        if speaker is None:
            self.fake.private_message(chat, text, first_name=f"User {chat}")
        else:
            user, name = speaker
            self.fake.group_message(chat, user, text, mention_bot=True, first_name=name, title="Ops")
        await self.harness.settled(SETTLE_TIMEOUT)
        if total(self.gateway.services.metrics.turns, outcome="failed"):
            raise RuntimeError(f"a turn failed:\n{self.fake.describe()}")
        emulator.clock.advance(20)  # a person reading and typing

    async def prompt(self, chat: int) -> SystemPrompt:
        session = await self.gateway.services.runtime.store.latest_session(f"telegram:dm:{chat}")
        assert session is not None
        return session.system_prompt


@asynccontextmanager
async def faked_telegram() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    async with fake.serve():
        yield fake


@asynccontextmanager
async def bench_gateway(bench: Bench, fake: FakeTelegram) -> AsyncIterator[GatewayBench]:
    """The bench's model, caching and context settings (``Bench.config``) plus a Telegram gateway."""
    users = [*DM_USERS, *(user for user, _ in SPEAKERS)]
    config = bench.config().model_copy(
        update={
            "gateway": GatewaySettings(http_port=0),
            "telegram": TelegramSettings(base_url=fake.base_url, allowed_users=[str(u) for u in users]),
        }
    )
    adapter = UnpacedTelegramAdapter(fake.token, base_url=fake.base_url)
    async with open_gateway(config, bench.home, adapters=lambda _storage: [adapter]) as gateway:
        bench.sync_clock(gateway.services.runtime)
        yield GatewayBench(bench, fake, gateway)


async def dm_chat(bench: Bench, turns: int) -> None:
    async with faked_telegram() as fake, bench_gateway(bench, fake) as chat:
        for number in range(turns):
            await chat.turn(DM_USERS[0], number)


async def interleaved(bench: Bench, turns: int, notes: Notes) -> None:
    async with faked_telegram() as fake, bench_gateway(bench, fake) as chats:
        for number in range(max(2, turns // 5)):
            for user in DM_USERS:
                await chats.turn(user, number)
        notes.prompts = {user: await chats.prompt(user) for user in DM_USERS}


async def group(bench: Bench, turns: int) -> None:
    async with faked_telegram() as fake, bench_gateway(bench, fake) as chat:
        for number in range(turns):
            await chat.turn(GROUP, number, speaker=SPEAKERS[number % len(SPEAKERS)])


async def restart(bench: Bench, turns: int) -> None:
    async with faked_telegram() as fake:
        async with bench_gateway(bench, fake) as chat:
            for number in range(turns // 2):
                await chat.turn(DM_USERS[0], number)
        async with bench_gateway(bench, fake) as chat:  # a new process on the same home
            for number in range(turns // 2, turns):
                await chat.turn(DM_USERS[0], number)


def shared_prefix_tokens(request: RecordedRequest, prompt: SystemPrompt) -> int:
    """Tokens of tools + the stable and context layers: the prefix every chat's prompt shares."""
    shared_layers = sum(1 for name, _ in prompt.layers() if name != "volatile")
    positions = anthropic_layout(request.json).positions
    return positions[len(request.json.get("tools") or []) + shared_layers - 1].cum_tokens


def first_requests(result: Result, notes: Notes) -> list[list[str]]:
    """The first request of each chat (only the user's message in ``messages``), in chat order."""
    firsts = [r for r in result.requests if r.ok and len(r.json["messages"]) == 1]
    rows = []
    for number, (user, request) in enumerate(zip(DM_USERS, firsts, strict=True), start=1):
        shared = shared_prefix_tokens(request, notes.prompts[user])
        verdict = "yes" if request.cache_read >= shared else ("first chat" if number == 1 else "NO")
        rows.append(
            [str(number), f"{request.prompt_tokens:,}", f"{shared:,}", f"{request.cache_read:,}",
             f"{request.oracle_tokens:,}", verdict]
        )  # fmt: skip
    return rows


FIRST_COLUMNS = [
    "chat",
    "prompt tokens",
    "tools + stable + context",
    "cache read",
    "oracle",
    "reads the shared prefix",
]


def shortfalls(result: Result) -> list[str]:
    """Requests that read less than the oracle allowed: where efficiency was lost."""
    lines = []
    for index, request in enumerate(r for r in result.requests if r.ok):
        if request.cache_read < request.oracle_tokens:
            lines.append(
                f"  {result.scenario}: request {index + 1} ({len(request.json['messages'])} messages): "
                f"read {request.cache_read:,} of {request.oracle_tokens:,} the oracle allows"
            )
    return lines


async def cache(turns: int) -> tuple[str, str, list[str]]:
    variant = VARIANTS[0]  # the defaults: anthropic claude-sonnet-4-6, layered breakpoints, ttl auto
    notes = Notes()
    scenarios: list[tuple[str, Callable[[Bench, int], Awaitable[None]]]] = [
        (f"{turns}-turn DM chat", dm_chat),
        ("8 DM chats interleaved", partial(interleaved, notes=notes)),
        ("group chat, 3 speakers", group),
        ("DM chat, gateway restarted halfway", restart),
    ]
    results = [await run_scenario(name, scenario, variant, turns) for name, scenario in scenarios]
    main = format_rows([result.row() for result in results])
    firsts = table(FIRST_COLUMNS, first_requests(results[1], notes))
    return main, firsts, [line for result in results for line in shortfalls(result)]


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
SECTIONS = ("latency", "throughput", "memory", "cache")


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
    print(f"State: {describe(STORAGE)}")
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
    global STORAGE
    STORAGE = args.storage
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    level = logging.WARNING if args.verbose else logging.ERROR
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    size = QUICK if args.quick else FULL
    only = args.only or list(SECTIONS)
    asyncio.run(main_async(size, only, trace=args.trace_memory))


if __name__ == "__main__":
    main()
