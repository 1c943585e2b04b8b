"""A soak: gateway processes under steady traffic for a long time, each sampled from outside as it goes.

    python -m benchmarks.soak                        # 60 minutes, one process, 2 messages/s over 50 chats
    python -m benchmarks.soak --processes 3          # three processes over one PostgreSQL and one Redis
    python -m benchmarks.soak --minutes 10 --rate 4  # shorter, busier
    python -m benchmarks.soak --storage postgresql://USER@HOST/DB   # a database on your server

Each gateway is a process of its own, started by ``benchmarks.cluster``'s harness (``open_gateway`` as
``herald gateway run`` opens it, Telegram's updates by webhook to the first process, python-telegram-bot's
pacing lifted: the fake would otherwise be the bottleneck). The fake Telegram runs in a process of its
own, the provider emulator in a thread of this one. One process keeps its state in its home's SQLite
(or a database on ``--storage``'s server); three share a PostgreSQL (a server of this run's own, or a
database on ``--storage``'s) and a Redis of this run's own.

The traffic: ``--rate`` direct messages a second round-robin over ``--chats`` chats, one in every
``FILE_EVERY`` an image sent as a file; a scheduled job that runs every minute and posts into the
owner's chat; one OpenAI-API request every ``API_EVERY`` seconds, to each process's HTTP server in turn.

Every ``--sample`` seconds one row, each process's figures side by side (``w0 / w1 / w2``): resident
memory and threads (``/proc/PID/status``), open file descriptors (``/proc/PID/fd``), asyncio tasks and
database connections out of the pool (its ``/metrics``: ``gateway_asyncio_tasks``,
``gateway_db_connections_out``, PostgreSQL only), Redis connections (its established TCP connections to
Redis's port); the median and p99 of the time to the first reply of the messages sent in that window;
and the machine's load average over one minute, so a reader sees whether the machine was quiet. The
final table counts each window's messages answered after its row was printed too.

The summary compares each process's last sample with its first one after warm-up (``WARM_UP`` of the
run): a process that leaks shows it as growth there. It passes when, in every process, RSS grew at most
``RSS_GROWTH``; asyncio tasks, open files, threads and connections ended at most ``SLACK`` above the
baseline; the last window's p99 is within ``P99_FACTOR`` times the median window p99 after warm-up; and
every message was answered exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from openai import AsyncOpenAI

from benchmarks import proc
from benchmarks.cluster import (
    QUIET_AFTER,
    Setup,
    cluster,
    first_replies,
    fresh_database,
    metric,
    scrape,
    settle,
)
from benchmarks.concurrency import QUESTION
from benchmarks.fake_telegram import Answers, FakeTelegramProcess, Sent
from benchmarks.gateway_harness import ms, percentile, table
from benchmarks.storage import describe
from gateway.openai_api.server import PREFIX
from tests.media_files import png_file
from tests.postgres import PostgresServer

FILE_EVERY = 20  # one message in this many is an image sent as a file
API_EVERY = 5.0  # seconds between two OpenAI-API requests
WARM_UP = 1 / 6  # the share of the run before the baseline sample
OWNER = 9_999  # the owner's chat: the scheduled job posts there
FIRST_CHAT = 10_000
API_KEY = "soak-key-0123456789abcdef0123"
RSS_GROWTH = 0.10  # RSS may end this much above the baseline
SLACK = 8  # turns in flight at a sample's instant and pooled keep-alive connections come and go; a leak of
# one per scheduled run (the rarest work, once a minute) is 50 after the hour's warm-up
P99_FACTOR = 2.0  # the last window's p99 within this many times the median window p99 after warm-up
COLUMNS = [
    "minute", "load (1 min)", "answered", "RSS", "vs baseline", "asyncio tasks", "open files", "threads",
    "db connections out", "Redis connections", "first reply p50", "first reply p99",
]  # fmt: skip


@dataclass(frozen=True)
class Figures:
    """One gateway process at one instant, read from outside."""

    answered: int  # turns answered so far (gateway_turns_total{outcome="answered"})
    rss_kb: int
    tasks: int
    files: int
    threads: int
    db_connections: int | None  # None: no pool (SQLite)
    redis_connections: int | None  # None: not in a cluster


GROWTH: dict[str, Callable[[Figures], int | None]] = {  # the counts that must not grow, read off Figures
    "asyncio tasks": lambda f: f.tasks,
    "open files": lambda f: f.files,
    "threads": lambda f: f.threads,
    "db connections out": lambda f: f.db_connections,
    "Redis connections": lambda f: f.redis_connections,
}


@dataclass
class Sample:
    at: float  # time.monotonic(): the same clock as the fake's
    load: float  # the machine's load average over the last minute
    processes: list[Figures]
    since: float  # the window's start: messages sent from then until ``at``
    p50: float | None
    p99: float | None


@dataclass
class Run:
    started: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    api_answers: int = 0
    api_failures: int = 0


def figures(pid: int, port: int, redis_port: int | None) -> Figures:
    """What process ``pid`` (serving HTTP on ``port``) holds now: ``/proc`` first, then its ``/metrics``
    (the scrape is a connection and a task of its own, and one task is in every sample alike)."""
    rss, files, threads = proc.rss_kb(pid), proc.open_files(pid), proc.threads(pid)
    redis = None if redis_port is None else proc.tcp_connections(pid, redis_port)
    text = scrape(port)
    connections = metric(text, "gateway_db_connections_out")
    return Figures(
        answered=int(metric(text, 'gateway_turns_total{outcome="answered"}') or 0),
        rss_kb=rss,
        tasks=int(metric(text, "gateway_asyncio_tasks") or 0),
        files=files,
        threads=threads,
        db_connections=None if connections is None else int(connections),
        redis_connections=redis,
    )


def window_waits(sent: list[Sent], answers: Answers, since: float, until: float) -> list[float]:
    """Seconds from each message sent in [since, until) to its first answer (answered ones only)."""
    earliest = first_replies(answers)
    return [
        earliest[(m.chat, m.message_id)] - m.at
        for m in sent
        if since <= m.at < until and (m.chat, m.message_id) in earliest
    ]


def with_waits(found: Sample, waits: list[float]) -> Sample:
    found.p50 = percentile(waits, 50) if waits else None
    found.p99 = percentile(waits, 99) if waits else None
    return found


# --- the traffic ---------------------------------------------------------------------------------


async def traffic(fake: FakeTelegramProcess, chats: list[int], rate: float, until: float, run: Run) -> None:
    image = png_file(64, 64)
    number = 0
    started = time.monotonic()
    while time.monotonic() < until:
        chat = chats[number % len(chats)]
        tag = f"c{chat}m{number}"
        if number % FILE_EVERY == FILE_EVERY - 1:
            run.sent.append(await fake.inject_file(chat, tag, image, name="dot.png", mime_type="image/png"))
        else:
            run.sent += await fake.inject([(chat, tag, "hello, how are things?")])
        number += 1
        await asyncio.sleep(max(0.0, started + number / rate - time.monotonic()))


async def api_traffic(ports: list[int], until: float, run: Run) -> None:
    """One OpenAI-API request every ``API_EVERY`` seconds, to each process in turn."""
    clients = [
        AsyncOpenAI(base_url=f"http://127.0.0.1:{port}{PREFIX}", api_key=API_KEY, max_retries=0, timeout=60.0)
        for port in ports
    ]
    try:
        for client in itertools.cycle(clients):
            if time.monotonic() >= until:
                break
            try:
                answer = await client.chat.completions.create(
                    model="herald", messages=[{"role": "user", "content": QUESTION}]
                )
                run.api_answers += bool(answer.choices and answer.choices[0].message.content)
            except Exception as error:  # counted and shown: the soak goes on
                run.api_failures += 1
                logging.warning("API request failed: %s", error)
            await asyncio.sleep(API_EVERY)
    finally:
        for client in clients:
            await client.close()


async def sample(setup: Setup, chats: list[int], run: Run) -> Sample:
    since = run.samples[-1].at if run.samples else run.started
    at = time.monotonic()
    answers, _ = await setup.fake.answers(chats)
    measured = [
        await asyncio.to_thread(figures, worker.process.pid, worker.port, setup.redis_port)
        for worker in setup.running
    ]
    setup.emulator.requests.clear()  # nothing here reads the emulator's records: they would only grow
    found = Sample(at, os.getloadavg()[0], measured, since, None, None)
    return with_waits(found, window_waits(run.sent, answers, since, at))


# --- the run -------------------------------------------------------------------------------------


@asynccontextmanager
async def state(
    processes: int, storage: str | None, postgres: PostgresServer | None
) -> AsyncIterator[str | None]:
    """The run's database: one process without ``--storage`` keeps its home's SQLite (None)."""
    if processes == 1 and storage is None:
        yield None
        return
    async with fresh_database(storage, postgres) as url:
        yield url


async def soak(
    processes: int, minutes: float, rate: float, chat_count: int, every: float, *, storage: str | None,
    postgres: PostgresServer | None,
) -> tuple[Run, str]:  # fmt: skip
    chats = [FIRST_CHAT + n for n in range(chat_count)]
    run = Run()
    os.environ["SOAK_API_KEY"] = API_KEY  # the workers inherit it
    settings: dict[str, dict[str, Any]] = {
        "gateway": {"admins": [f"telegram:{OWNER}"]},
        "api": {"keys": [{"key": "$SOAK_API_KEY", "person": "api:soak"}]},
    }
    async with (
        state(processes, storage, postgres) as database,
        cluster(
            processes, paced=False, database=database, mode="webhook", clustered=processes > 1,
            settings=settings,
        ) as setup,
    ):  # fmt: skip
        fake = setup.fake
        await fake.say(OWNER, "/cron add every 1m | Say one short sentence about the time.")
        run.started = time.monotonic()
        until = run.started + minutes * 60
        load = [
            asyncio.create_task(traffic(fake, chats, rate, until, run)),
            asyncio.create_task(api_traffic([worker.port for worker in setup.running], until, run)),
        ]
        print("| " + " | ".join(COLUMNS) + " |", flush=True)
        while time.monotonic() < until:
            await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))
            run.samples.append(await sample(setup, chats, run))
            print(row(run.samples[-1], run.started, baseline(run)), flush=True)
        await asyncio.gather(*load)
        await settle(fake, run.sent, chats)
        await asyncio.sleep(QUIET_AFTER)  # a doubled answer would show up now
        once, expected, problems = await fake.check(chats)
        answers, _ = await fake.answers([*chats, OWNER])
    for found in run.samples:  # each window again, with the answers that came after its row
        with_waits(found, window_waits(run.sent, answers, found.since, found.at))
    posts = sum(1 for answer in answers[OWNER] if answer.reply_to is None and not answer.deleted)
    verdict = "PASS" if once == expected and not problems else "FAIL"
    summary = (
        f"{verdict} every message answered exactly once: {once}/{expected}\n"
        f"API answers {run.api_answers}, failures {run.api_failures}; the every-minute job posted {posts} "
        f"times in {minutes:g} minutes"
    )
    if problems:
        summary += "\nproblems: " + "; ".join(problems)
    return run, summary


# --- the report ----------------------------------------------------------------------------------


def baseline(run: Run) -> Sample:
    """The first sample after warm-up (the first one until then)."""
    if not run.samples:
        raise ValueError("no samples yet")
    start = run.samples[0].at
    end = run.samples[-1].at
    for found in run.samples:
        if found.at - start >= (end - start) * WARM_UP:
            return found
    return run.samples[0]


def side_by_side(values: list[str]) -> str:
    return " / ".join(values)


def count(value: int | None) -> str:
    return "n/a" if value is None else str(value)


def row(found: Sample, started: float, base: Sample) -> str:
    pairs = list(zip(found.processes, base.processes, strict=True))
    cells = [
        f"{(found.at - started) / 60:.1f}",
        f"{found.load:.2f}",
        side_by_side([f"{f.answered:,}" for f in found.processes]),
        side_by_side([f"{f.rss_kb / 1024:.1f}" for f in found.processes]) + " MiB",
        side_by_side([f"{(f.rss_kb - b.rss_kb) / b.rss_kb:+.1%}" for f, b in pairs]),
        *(side_by_side([count(read(f)) for f in found.processes]) for read in GROWTH.values()),
        "-" if found.p50 is None else ms(found.p50),
        "-" if found.p99 is None else ms(found.p99),
    ]
    return "| " + " | ".join(cells) + " |"


def verdicts(run: Run) -> list[str]:
    """The pass/fail lines: each process's last sample against the baseline, and p99's stability."""
    base, last = baseline(run), run.samples[-1]
    lines = []
    growth = [(last_f.rss_kb - base_f.rss_kb) / base_f.rss_kb for last_f, base_f in
              zip(last.processes, base.processes, strict=True)]  # fmt: skip
    lines.append(
        f"{'PASS' if max(growth) <= RSS_GROWTH else 'FAIL'} RSS within {RSS_GROWTH:.0%} of the baseline: "
        + side_by_side([f"{g:+.1%}" for g in growth])
    )
    for name, read in GROWTH.items():
        pairs = [(read(b), read(f)) for b, f in zip(base.processes, last.processes, strict=True)]
        if all(before is None for before, _ in pairs):
            continue
        grew = any(b is not None and f is not None and f > b + SLACK for b, f in pairs)
        lines.append(
            f"{'FAIL' if grew else 'PASS'} {name} not growing (at most {SLACK} above the baseline): "
            + side_by_side([f"{count(b)} → {count(f)}" for b, f in pairs])
        )
    after = [s.p99 for s in run.samples[run.samples.index(base) :] if s.p99 is not None]
    if after and last.p99 is not None:
        median = statistics.median(after)
        stable = last.p99 <= P99_FACTOR * median
        lines.append(
            f"{'PASS' if stable else 'FAIL'} first-reply p99 stable (the last window's within "
            f"{P99_FACTOR:g}× the median window p99 after warm-up): {ms(last.p99)} vs {ms(median)}, highest "
            f"{ms(max(after))}"
        )
    else:
        lines.append("FAIL first-reply p99 stable: the last window has no answered message")
    return lines


def report(run: Run, summary: str, processes: int) -> str:
    base, last = baseline(run), run.samples[-1]
    rows = [row(found, run.started, base).strip("| ").split(" | ") for found in run.samples]
    names = "" if processes == 1 else f" (per process: {' / '.join(f'w{n}' for n in range(processes))})"
    window = (
        f"after warm-up{names}, minute {(base.at - run.started) / 60:.1f} → "
        f"{(last.at - run.started) / 60:.1f}:"
    )
    loads = [s.load for s in run.samples]
    machine = f"machine load (1 min) {min(loads):.2f}–{max(loads):.2f} on {os.cpu_count()} cores"
    return "\n".join([table(COLUMNS, rows), "", machine, summary, window, *verdicts(run)])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=1, help="gateway processes (more than 1: a cluster)")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=2.0, help="messages a second")
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument(
        "--storage", metavar="URL", default=None,
        help="a PostgreSQL server to make the run's database on (default: one process on SQLite, a "
        "cluster on a PostgreSQL server of its own)",
    )  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # the emulator takes any key
    postgres = PostgresServer() if args.processes > 1 and args.storage is None else None
    try:
        if postgres is not None:
            postgres.start()
        where = "PostgreSQL (a server of its own)" if postgres is not None else describe(args.storage)
        redis = "; Redis (a server of its own)" if args.processes > 1 else ""
        print(f"{args.processes} gateway process(es). State: {where}{redis}", flush=True)
        run, summary = asyncio.run(
            soak(
                args.processes, args.minutes, args.rate, args.chats, args.sample, storage=args.storage,
                postgres=postgres,
            )
        )  # fmt: skip
    finally:
        if postgres is not None:
            postgres.stop()
    print()
    print(report(run, summary, args.processes))


if __name__ == "__main__":
    main()
