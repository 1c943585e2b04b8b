"""A soak: one gateway under steady traffic for a long time, sampled as it goes.

    python -m benchmarks.soak                        # 60 minutes, 2 messages a second over 50 chats
    python -m benchmarks.soak --minutes 10 --rate 4  # shorter, busier
    python -m benchmarks.soak --storage postgresql://user@127.0.0.1/db   # on PostgreSQL

The gateway runs in this process, opened as ``herald gateway run`` opens it, with Telegram's pacing
lifted (the fake would otherwise be the bottleneck); the fake Telegram and the provider emulator run in
processes of their own. The traffic, every second: ``--rate`` direct messages round-robin over
``--chats`` chats, one in every ``FILE_EVERY`` an image sent as a file; a scheduled job that runs every
minute and posts into the owner's chat; one OpenAI-API request every ``API_EVERY`` seconds.

Every ``--sample`` seconds one row: the gateway's resident memory (this process: the fakes are apart),
asyncio tasks, open file descriptors, threads, database connections checked out (PostgreSQL) and the
median and p99 of the time to the first reply of the messages sent in that window. The summary compares
the last sample with the first one after warm-up (``WARM_UP`` of the run): a process that leaks shows it
as growth there. Every message is checked to have been answered exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from tempfile import TemporaryDirectory

from openai import AsyncOpenAI

from benchmarks.concurrency import QUESTION, emulator_process
from benchmarks.fake_telegram import FakeTelegramProcess, Sent, rss_kb
from benchmarks.gateway_harness import (
    fresh_home,
    fresh_state,
    ms,
    percentile,
    process_config,
    running_gateway,
    settle,
    table,
    turns_finished,
    use_storage,
)
from gateway.app import Gateway
from gateway.config import HeraldConfig
from gateway.openai_api.server import PREFIX
from tests.media_files import png_file

FILE_EVERY = 20  # one message in this many is an image sent as a file
API_EVERY = 5.0  # seconds between two OpenAI-API requests
WARM_UP = 1 / 6  # the share of the run before the baseline sample
OWNER = 9_999  # the owner's chat: the scheduled job posts there
API_KEY = "soak-key-0123456789abcdef0123"
COLUMNS = [
    "minute", "answered", "RSS", "vs baseline", "asyncio tasks", "open files", "threads",
    "db connections out", "first reply p50", "first reply p99",
]  # fmt: skip


@dataclass
class Sample:
    at: float
    answered: int
    rss_kb: int
    tasks: int
    files: int
    threads: int
    connections: int | None
    p50: float | None
    p99: float | None


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    api_answers: int = 0
    api_failures: int = 0


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def connections_out(gateway: Gateway) -> int | None:
    """Connections PostgreSQL's pool has handed out and not got back (None: SQLite has one, always)."""
    engine = getattr(gateway.services.runtime.storage, "_engine", None)
    pool = getattr(getattr(engine, "sync_engine", None), "pool", None)
    checked_out = getattr(pool, "checkedout", None)
    return int(checked_out()) if callable(checked_out) else None


def soak_config(emulator_url: str, base_url: str, chats: list[int]) -> HeraldConfig:
    config = process_config(emulator_url, base_url, [*chats, OWNER], interval=1.0).model_dump()
    config["gateway"]["admins"] = [f"telegram:{OWNER}"]
    config["api"] = {"keys": [{"key": "$SOAK_API_KEY", "person": "api:soak"}]}
    return HeraldConfig.model_validate(config)


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


async def api_traffic(gateway: Gateway, until: float, run: Run) -> None:
    client = AsyncOpenAI(base_url=gateway.http.url + PREFIX, api_key=API_KEY, max_retries=0, timeout=60.0)
    try:
        while time.monotonic() < until:
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
        await client.close()


async def sample(gateway: Gateway, fake: FakeTelegramProcess, since: float, run: Run) -> None:
    gc.collect()
    window = [message for message in run.sent if message.at >= since]
    answers, _ = await fake.answers(sorted({message.chat for message in window}))
    firsts = {(chat, answer.reply_to): answer.first for chat, found in answers.items() for answer in found}
    waits = [firsts[(m.chat, m.message_id)] - m.at for m in window if (m.chat, m.message_id) in firsts]
    run.samples.append(
        Sample(
            at=time.monotonic(),
            answered=turns_finished(gateway),
            rss_kb=rss_kb(),
            tasks=len(asyncio.all_tasks()),
            files=open_files(),
            threads=threading.active_count(),
            connections=connections_out(gateway),
            p50=percentile(waits, 50) if waits else None,
            p99=percentile(waits, 99) if waits else None,
        )
    )


async def soak(minutes: float, rate: float, chat_count: int, every: float) -> tuple[Run, str]:
    chats = [10_000 + n for n in range(chat_count)]
    run = Run()
    os.environ["SOAK_API_KEY"] = API_KEY
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, FakeTelegramProcess() as fake:
        home = fresh_home(tmp)
        async with fresh_state():
            config = soak_config(url, fake.base_url, chats)
            async with running_gateway(config, home, fake.token, paced=False) as gateway:
                await fake.say(OWNER, "/cron add every 1m | Say one short sentence about the time.")
                started = time.monotonic()
                until = started + minutes * 60
                load = [
                    asyncio.create_task(traffic(fake, chats, rate, until, run)),
                    asyncio.create_task(api_traffic(gateway, until, run)),
                ]
                since = started
                while time.monotonic() < until:
                    await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))
                    await sample(gateway, fake, since, run)
                    since = run.samples[-1].at
                    print(row(run.samples[-1], started, baseline(run)), flush=True)
                await asyncio.gather(*load)
                await settle(gateway, len(run.sent), 300.0)
                once, expected, problems = await fake.check(chats)
                owner, _ = await fake.answers([OWNER])
    posts = sum(1 for answer in owner[OWNER] if answer.reply_to is None and not answer.deleted)
    summary = (
        f"answered exactly once: {once}/{expected}; API answers {run.api_answers}, failures "
        f"{run.api_failures}; the every-minute job posted {posts} times in {minutes:g} minutes"
    )
    if problems:
        summary += "\nproblems: " + "; ".join(problems)
    return run, summary


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


def row(found: Sample, started: float, base: Sample) -> str:
    cells = [
        f"{(found.at - started) / 60:.1f}",
        f"{found.answered:,}",
        f"{found.rss_kb / 1024:.1f} MiB",
        f"{(found.rss_kb - base.rss_kb) / base.rss_kb:+.1%}",
        str(found.tasks),
        str(found.files),
        str(found.threads),
        "n/a" if found.connections is None else str(found.connections),
        "-" if found.p50 is None else ms(found.p50),
        "-" if found.p99 is None else ms(found.p99),
    ]
    return "| " + " | ".join(cells) + " |"


def report(run: Run, summary: str) -> str:
    base = baseline(run)
    last = run.samples[-1]
    started = run.samples[0].at - (run.samples[1].at - run.samples[0].at if len(run.samples) > 1 else 0)
    rows = [row(found, started, base).strip("| ").split(" | ") for found in run.samples]
    growth = (
        f"after warm-up (minute {(base.at - started) / 60:.1f} → {(last.at - started) / 60:.1f}): RSS "
        f"{(last.rss_kb - base.rss_kb) / base.rss_kb:+.1%}, asyncio tasks {base.tasks} → {last.tasks}, open "
        f"files {base.files} → {last.files}, threads {base.threads} → {last.threads}"
    )
    return "\n".join([table(COLUMNS, rows), "", summary, growth])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=2.0, help="messages a second")
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--storage", default=None, help="a PostgreSQL URL to run on (default: SQLite)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # the emulator takes any key
    use_storage(args.storage)
    run, summary = asyncio.run(soak(args.minutes, args.rate, args.chats, args.sample))
    print()
    print(report(run, summary))


if __name__ == "__main__":
    main()
