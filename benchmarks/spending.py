"""Spend limits: what the budget check costs each model request, on SQLite, PostgreSQL and a cluster.

    python -m benchmarks.spending                          # 20,000 requests on each backend
    python -m benchmarks.spending --requests 5000          # fewer
    python -m benchmarks.spending --storage postgresql://USER@HOST:PORT/DB   # a PostgreSQL of yours

Every request is charged as a chat's turn is (``gateway.budgets.limits.turn_charge``): to the bot, its
chat (one of 500) and its person (one of 200), each with a daily and a monthly limit large enough never
to refuse, so every check does the whole work (three scopes, six windows, a reservation on each).
Requests run one after the other (what a check adds to its request is its latency), first one per
chat (its windows met for the first time: read from the database), then ``--requests`` to random chats
and people; each is what ``agent.model_calls.ModelCalls`` does around a request, minus the request:

- **check**: ``SpendGate.admit`` (estimate reserved on every limited window, or a refusal). One
  process: the figures are in memory, read from the database the first time a window is met and again
  in the background every second. Cluster: one Lua script in Redis, the figures shared by every process.
- **record**: the usage transaction that stores the request (its row, the session's totals) with and
  without its cost added to the six spending windows: what counting it costs the database write.
- **settle**: the gate's share after the record (memory, or one Lua script in Redis).

For the cluster, bare Redis PINGs on the same connection are timed after it: what any Redis round trip
costs on the machine at that moment.

PostgreSQL and Redis are servers of this run's own (Debian's packages, as the tests start them; the
PostgreSQL test server runs without fsync) unless ``--storage`` names a PostgreSQL server.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from redis.asyncio import Redis

from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from agent.prompt import SystemPrompt
from agent.spending.charge import charging
from agent.spending.counters import Loader, LocalCounters, SpendCounters
from agent.spending.gate import SpendGate
from agent.store import NewSession, SessionStore
from agent.usage import RequestUsage, Usage
from benchmarks.gateway_harness import percentile, table
from benchmarks.storage import describe, run_storage
from gateway.budgets.limits import default_charge, turn_charge
from gateway.cluster.counting.spending import RedisCounters
from gateway.cluster.redis import open_redis
from gateway.config import BudgetSettings
from tests.postgres import PostgresServer
from tests.redis_server import RedisServer

CHATS = 500
PEOPLE = 200
ZONE = dt.UTC
SETTINGS = BudgetSettings.model_validate(
    {kind: {"daily_usd": 1e6, "monthly_usd": 1e7} for kind in ("bot", "chat", "person")}
)
USAGE = Usage(input_tokens=50, cache_read_tokens=3000, output_tokens=200)
REQUEST = RequestUsage("turn", "anthropic", "claude-sonnet-4-6", USAGE, cost=0.0042, uncached_cost=0.012)
COLUMNS = ["backend", "check p50", "check p99", "check p99.9", "first check of a window p50", "settle p99",
           "record p50 (+ windows)", "record p99 (+ windows)"]  # fmt: skip


@dataclass
class Times:
    first: list[float] = field(default_factory=list)  # a check that met its windows for the first time
    check: list[float] = field(default_factory=list)
    settle: list[float] = field(default_factory=list)
    record: list[float] = field(default_factory=list)  # with the spending windows
    plain: list[float] = field(default_factory=list)  # without


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 0.001 else f"{seconds * 1e3:.2f} ms"


async def sessions(store: SessionStore) -> None:
    prompt = SystemPrompt(stable="stable", context="", volatile="volatile")
    for chat in range(CHATS):
        await store.sessions.create(NewSession(
            id=f"s{chat}", session_key=f"telegram:dm:{chat}", source="telegram", platform="telegram",
            system_prompt=prompt, tools_json="[]", provider="anthropic", model="claude-sonnet-4-6",
        ))  # fmt: skip


async def measure(
    store: SessionStore, counters_on: Callable[[Loader], SpendCounters], requests: int
) -> Times:
    """One request after the other (a check's latency is what it adds to its request): first every
    chat once (its windows met for the first time), then ``requests`` to random chats and people."""
    counters = counters_on(store.spending.spent)
    gate = SpendGate(counters, store.spending, zone=ZONE, warn_at=None, default=default_charge(SETTINGS))
    times = Times()
    rng = random.Random(7)
    chats = [(chat, chat % PEOPLE, times.first) for chat in range(CHATS)]
    steady = [(rng.randrange(CHATS), rng.randrange(PEOPLE), times.check) for _ in range(requests)]
    for number, (chat, person, checks) in enumerate([*chats, *steady]):
        charge = turn_charge(SETTINGS, f"telegram:dm:{chat}", f"telegram:{person}", is_admin=False)
        with charging(charge):
            started = time.perf_counter()
            admission = await gate.admit(0.01)
            checks.append(time.perf_counter() - started)
        started = time.perf_counter()
        if number % 2:
            totals = (await store.usage.record(f"s{chat}", REQUEST, spend=admission.keys)).spent
            times.record.append(time.perf_counter() - started)
        else:
            totals = (await store.usage.record(f"s{chat}", REQUEST)).spent
            times.plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        await gate.settle(admission, REQUEST.cost, totals)
        times.settle.append(time.perf_counter() - started)
    await gate.aclose()
    return times


def row(backend: str, times: Times) -> list[str]:
    return [
        backend,
        us(percentile(times.check, 50)),
        us(percentile(times.check, 99)),
        us(percentile(times.check, 99.9)),
        us(percentile(times.first, 50)),
        us(percentile(times.settle, 99)),
        f"{us(percentile(times.plain, 50))} → {us(percentile(times.record, 50))}",
        f"{us(percentile(times.plain, 99))} → {us(percentile(times.record, 99))}",
    ]


@asynccontextmanager
async def opened(url: str | None, tmp: Path) -> AsyncIterator[SessionStore]:
    async with open_storage(parse_storage_url(url, tmp / "state.db")) as storage:
        store = SessionStore(storage)
        await sessions(store)
        yield store


async def round_trips(redis: Redis, count: int) -> list[float]:
    """Bare PINGs on the same connection: what any Redis command costs on this machine now."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await redis.ping()
        times.append(time.perf_counter() - started)
    return times


def local(load: Loader) -> SpendCounters:
    return LocalCounters(load, hold_ttl=600)


async def main_async(requests: int, postgres: str, redis_url: str) -> list[list[str]]:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        async with opened(None, tmp) as store:
            rows.append(row("SQLite, one process", await measure(store, local, requests)))
        async with run_storage(postgres) as section, opened(section["url"], tmp) as store:
            rows.append(row("PostgreSQL, one process", await measure(store, local, requests)))
        async with run_storage(postgres) as section, opened(section["url"], tmp) as store:
            async with open_redis(redis_url) as redis:
                shared = await measure(store, lambda load: RedisCounters(redis, load, hold_ttl=600), requests)
                pings = await round_trips(redis, requests)
            rows.append(row("PostgreSQL + Redis (a cluster's process)", shared))
            rows.append(["(Redis PING, for comparison)", us(percentile(pings, 50)), us(percentile(pings, 99)),
                         us(percentile(pings, 99.9)), "", "", "", ""])  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000, help="requests per backend (default 20,000)")
    parser.add_argument("--storage", metavar="URL", help="a PostgreSQL server (default: one of its own)")
    args = parser.parse_args()
    with ExitStack() as servers:
        postgres = args.storage
        if postgres is None:
            server = PostgresServer()
            server.start()
            servers.callback(server.stop)
            postgres = server.url("postgres")
        redis_server = RedisServer()
        redis_server.start()
        servers.callback(redis_server.stop)
        rows = asyncio.run(main_async(args.requests, postgres, redis_server.url))
    where = describe(args.storage) if args.storage else "PostgreSQL (a server of its own, fsync off)"
    scopes = f"the bot, one of {CHATS} chats and one of {PEOPLE} people, a daily and a monthly limit each"
    print(f"{args.requests:,} requests one after the other, each charged to {scopes}; {where}\n")
    print(table(COLUMNS, rows))


if __name__ == "__main__":
    main()
