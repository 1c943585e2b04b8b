"""Cache-miss reports: what they find in the cache benchmark's scenarios, and what the check costs.

    python -m benchmarks.cache_misses                       # SQLite (state.db in each run's home)
    python -m benchmarks.cache_misses --storage postgresql://user@host/db   # a database per run there

Every scenario of ``benchmarks/cache.py`` runs through the real SDKs against the emulator, as there.
For each, the misses found by cause; a scenario without a pause, a model switch, a compression or a
changed prompt should have none. Then the cost of the check per request (``CacheWatch.observe``: the
request rebuilt as the cache sees it, one read and one write of the chat's prefix records), split into
the database's part and the rest, and the same for a chat that grows to ~130,000 tokens. The check is
timed by wrapping its methods here; product code is unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from agent.cache_watch import CacheWatch, Exchange
from agent.store.cache_misses import CacheMiss, CacheMissLog
from agent.store.usage import Recorded, UsageLedger
from benchmarks.cache import SCENARIOS, VARIANTS, Bench, Variant, run_scenario, spec
from benchmarks.storage import describe, run_storage
from tests.emulator import Reply
from tests.helpers import run_turn


@dataclass
class Timings:
    """Seconds per call of the check and of its database transaction (in call order)."""

    observe: list[float] = field(default_factory=list)
    database: list[float] = field(default_factory=list)
    usage: list[float] = field(
        default_factory=list
    )  # recording the request's usage: the write every request had before
    prompt_tokens: list[int] = field(default_factory=list)
    misses: list[CacheMiss] = field(default_factory=list)


@asynccontextmanager
async def timed() -> AsyncIterator[Timings]:
    """Time every ``CacheWatch.observe`` and its one database transaction while the block runs."""
    timings = Timings()
    observe, record, usage = CacheWatch.observe, CacheMissLog.record, UsageLedger.record

    async def timed_observe(self: CacheWatch, exchange: Exchange) -> CacheMiss | None:
        start = time.perf_counter()
        miss = await observe(self, exchange)
        timings.observe.append(time.perf_counter() - start)
        timings.prompt_tokens.append(exchange.usage.usage.prompt_tokens)
        if miss is not None:
            timings.misses.append(miss)
        return miss

    async def timed_record(self: CacheMissLog, *args: Any) -> CacheMiss | None:
        start = time.perf_counter()
        try:
            return await record(self, *args)
        finally:
            timings.database.append(time.perf_counter() - start)

    async def timed_usage(self: UsageLedger, *args: Any, **options: Any) -> Recorded:
        start = time.perf_counter()
        try:
            return await usage(self, *args, **options)
        finally:
            timings.usage.append(time.perf_counter() - start)

    CacheWatch.observe = timed_observe  # type: ignore[method-assign]
    CacheMissLog.record = timed_record  # type: ignore[method-assign,assignment]
    UsageLedger.record = timed_usage  # type: ignore[method-assign]
    try:
        yield timings
    finally:
        CacheWatch.observe = observe  # type: ignore[method-assign]
        CacheMissLog.record = record  # type: ignore[method-assign]
        UsageLedger.record = usage  # type: ignore[method-assign]


async def long_answers(bench: Bench, turns: int) -> None:
    """One chat of long answers: its prompt grows by ~2,000 tokens a turn, to ~130,000 after 60."""
    async with bench.runtime(context_length=1_000_000) as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        for number in range(max(turns, 60)):
            bench.emulator.script(Reply(text_tokens=2000))
            current = await runtime.store.sessions.get(session.id)
            assert current is not None
            result = await run_turn(runtime, current, f"Turn {number}: go on with the next chapter, please.")
            if result.error:
                raise RuntimeError(result.error)
            bench.emulator.clock.advance(20)


def milliseconds(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def cost_row(label: str, timings: Timings, last: int | None = None) -> str:
    observe = timings.observe[-last:] if last else timings.observe
    database = timings.database[-last:] if last else timings.database
    usage = timings.usage[-last:] if last else timings.usage
    prompt = timings.prompt_tokens[-last:] if last else timings.prompt_tokens
    mean, p50, p99 = 1000 * statistics.mean(observe), milliseconds(observe, 0.5), milliseconds(observe, 0.99)
    return (
        f"| {label} | {len(observe)} | {statistics.mean(prompt):,.0f} | {mean:.2f} | {p50:.2f} | {p99:.2f} "
        f"| {1000 * statistics.mean(database):.2f} | {1000 * statistics.mean(usage):.2f} |"
    )


COST_HEADER = (
    "| requests | n | mean prompt tokens | check mean ms | p50 ms | p99 ms | of it its transaction, mean ms "
    "| for comparison: recording the usage, mean ms |\n"
    "|---|---|---|---|---|---|---|---|"
)


async def run(
    name: str,
    scenario: Callable[[Bench, int], Awaitable[None]],
    variant: Variant,
    turns: int,
    base: str | None,
) -> Timings:
    async with run_storage(base) as storage, timed() as timings:
        await run_scenario(name, scenario, variant, turns, storage)
    return timings


async def main_async(turns: int, base: str | None) -> str:
    lines = [
        f"Storage: {describe(base)}",
        "",
        "| scenario | variant | requests | misses by cause |",
        "|---|---|---|---|",
    ]
    everything = Timings()
    for name, scenario in SCENARIOS.items():
        for variant in VARIANTS:
            timings = await run(name, scenario, variant, turns, base)
            causes = Counter(miss.cause for miss in timings.misses)
            found = ", ".join(f"{cause} {count}" for cause, count in sorted(causes.items())) or "none"
            lines.append(f"| {name} | {variant.label} | {len(timings.observe)} | {found} |")
            everything.observe += timings.observe
            everything.database += timings.database
            everything.usage += timings.usage
            everything.prompt_tokens += timings.prompt_tokens
    grown = await run("long answers", long_answers, VARIANTS[0], turns, base)
    lines += ["", COST_HEADER, cost_row("every scenario and variant above", everything)]
    lines.append(cost_row("a chat growing to ~130k tokens, its last 10", grown, last=10))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=30, help="turns per chat (default 30)")
    parser.add_argument("--storage", help="a PostgreSQL URL (a database per run is created there)")
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    os.environ.setdefault("OPENAI_API_KEY", "benchmark")
    print(asyncio.run(main_async(args.turns, args.storage)))


if __name__ == "__main__":
    main()
