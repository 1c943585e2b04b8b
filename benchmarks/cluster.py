"""Cluster benchmark: one bot on 1 and on 3 gateway processes over one PostgreSQL and one Redis.

    python -m benchmarks.cluster                 # 1,000 chats × 3 messages, through 1 and 3 processes
    python -m benchmarks.cluster --quick         # 200 chats × 3 messages
    python -m benchmarks.cluster --paced         # also with python-telegram-bot's flood pacing on
    python -m benchmarks.cluster --storage postgresql://USER@HOST:PORT/DB   # a server of yours

Each gateway is a process of its own (``python -m benchmarks.cluster --worker HOME``: ``open_gateway``
as ``herald gateway run`` opens it, with the Telegram adapter in webhook mode and, unless ``--paced``,
without python-telegram-bot's 30 sends/s pacing, which would otherwise be what is measured). The fake
Telegram Bot API runs in a process of its own and delivers every update by webhook to the first
gateway (as a load balancer would to any); the provider emulator runs in this process, so its records
give the cache figures. PostgreSQL and Redis are servers of this run's own (Debian's packages, as the
tests start them), unless ``--storage`` names a PostgreSQL server.

Per run: every message answered exactly once (by the model's answer to it), each chat's answers in
the order of its messages, messages/s from the first injection to the last answer, p50/p99 from a
message's injection to its answer's first send (both instants on the fake's clock), the turns each
process ran, and cache efficiency (cache read ÷ what an oracle could have read): a chat's turns read
the same stored prompt bytes whichever process runs them. A last run measures the failover gap: three
processes with Telegram polled by the elected leader, messages arriving at 10 per second for 30 s, the
leader SIGKILLed ten seconds in; the gap is from the kill to the first answer to a message sent after
it (``--no-failover`` skips it). Repeated kills, a rolling restart and a single process's restart:
``benchmarks.cluster_restarts``, on this module's harness.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import redis
import yaml

from adapters.telegram.spec import SPEC as TELEGRAM
from benchmarks.cache import PROJECT_NOTES
from benchmarks.concurrency import QUESTION
from benchmarks.fake_telegram import Answers, Check, FakeTelegramProcess, Sent
from benchmarks.gateway_harness import UnpacedTelegramAdapter, ms, percentile, table
from benchmarks.storage import describe, run_storage
from gateway.app import open_gateway
from gateway.config import ClusterSettings, load_config
from gateway.home import HeraldHome, ensure_home
from tests.emulator import ProviderEmulator, RecordedRequest
from tests.postgres import PostgresServer, free_port
from tests.redis_server import RedisServer

FIRST_CHAT = 1000
START_TIMEOUT = 240.0  # a bound: a loaded machine starts a process in tens of seconds
SETTLE_TIMEOUT = 900.0
STALL_TIMEOUT = 60.0  # no new answer for this long: report what was answered
QUIET_AFTER = 2.0  # seconds of watching after the last answer: a doubled answer would show up
STREAM = "herald:work"
FAILOVER_CHATS = 50
FAILOVER_SECONDS = 30.0  # messages keep arriving this long; the leader is killed a third of the way in
FAILOVER_RATE = 10  # messages per second
LEADER_TTL = ClusterSettings().leader_ttl  # the default, which the failover run keeps
COLUMNS = [
    "processes", "Telegram pacing", "messages", "one turn each", "chat order kept",
    "one Telegram answer each", "messages/s", "first reply p50", "first reply p99", "turns per process",
    "cache efficiency", "failover gap",
]  # fmt: skip


# --- a worker process --------------------------------------------------------------------------


async def run_worker(home: HeraldHome, token: str, paced: bool) -> None:
    """One gateway process until SIGTERM."""
    config = load_config(home.config_path)
    settings = config.platform_settings(TELEGRAM)
    if paced:
        opened = open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": token})
    else:
        adapter = UnpacedTelegramAdapter(
            token, base_url=settings.base_url, mode=settings.mode, webhook_url=settings.webhook_url
        )
        opened = open_gateway(config, home, adapters=lambda _storage: [adapter])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with opened:
        await stop.wait()


# --- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worker:
    process: subprocess.Popen[bytes]
    port: int


def write_home(root: Path, index: int, *, provider: str, telegram: str, database: str | None,
               redis_url: str | None, ports: list[int], context: Path, mode: str,
               settings: Mapping[str, Mapping[str, Any]] | None = None) -> HeraldHome:  # fmt: skip
    """Worker ``index``'s home; ``database`` None: the home's SQLite, ``redis_url`` None: no cluster;
    ``settings``: more keys per section, over these (a soak's admins and API keys)."""
    home = HeraldHome(root / f"home{index}")
    ensure_home(home)
    config: dict[str, dict[str, Any]] = {
        "model": {"base_url": provider},
        "agent": {"context_dir": str(context)},
        "telegram": {"base_url": telegram, "mode": mode},
        "gateway": {"allow_all": True, "http_port": ports[index], "stream_edit_interval": 0},
    }
    if mode == "webhook":
        config["telegram"]["webhook_url"] = f"http://127.0.0.1:{ports[0]}/telegram/webhook"
    if database:
        config["storage"] = {"url": database}
    if redis_url:
        config["cluster"] = {"redis_url": redis_url, "instance_id": f"w{index}"}
    for section, values in (settings or {}).items():
        config[section] = {**config.get(section, {}), **values}
    home.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return home


def start_worker(home: HeraldHome, port: int, token: str, *, paced: bool) -> Worker:
    """One gateway process on ``home`` (``worker_main``), serving HTTP on ``port``."""
    code = "from benchmarks.cluster import worker_main; worker_main()"
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(home.root), token, "paced" if paced else "unpaced"],
        env={**os.environ, "HERALD_HOME": str(home.root)},
    )
    return Worker(process, port)


@contextmanager
def workers(homes: list[HeraldHome], ports: list[int], token: str, *, paced: bool) -> Iterator[list[Worker]]:
    """The workers, started; on exit each one still in the list (a restarted one replaces its entry)
    is stopped (SIGTERM, then SIGKILL after 30 s)."""
    started: list[Worker] = []
    try:
        for home, port in zip(homes, ports, strict=True):
            started.append(start_worker(home, port, token, paced=paced))
        yield started
    finally:
        for worker in started:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in started:
            try:
                worker.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=10)


def wait_until(predicate: object, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def consumers(client: redis.Redis) -> set[str]:
    try:
        return {str(c["name"]) for c in client.xinfo_consumers(STREAM, "workers")}
    except redis.ResponseError:
        return set()


def scrape(port: int) -> str:
    """A worker's ``/metrics`` (Prometheus text)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def metric(text: str, sample: str) -> float | None:
    """The value of ``sample`` in a scrape, a name with its labels as written
    (``gateway_turns_total{outcome="answered"}``); None: not shown."""
    found = re.search(rf"^{re.escape(sample)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def turns_answered(port: int) -> int:
    return int(metric(scrape(port), 'gateway_turns_total{outcome="answered"}') or 0)


def replied(sent: list[Sent], answers: Answers) -> int:
    """Messages with at least one answer."""
    got = {
        (chat, a.reply_to) for chat, chat_answers in answers.items() for a in chat_answers if not a.deleted
    }
    return sum((m.chat, m.message_id) in got for m in sent)


async def settle(fake: FakeTelegramProcess, sent: list[Sent], users: list[int]) -> None:
    """Until every message has an answer, or nothing moved for :data:`STALL_TIMEOUT` seconds."""
    last, moved = -1, time.monotonic()
    deadline = moved + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        count = replied(sent, (await fake.answers(users))[0])
        if count == len(sent):
            return
        if count != last:
            last, moved = count, time.monotonic()
        elif time.monotonic() - moved > STALL_TIMEOUT:
            print(f"  stalled at {count}/{len(sent)} answered", flush=True)
            return
        await asyncio.sleep(1.0)


@asynccontextmanager
async def fresh_database(storage: str | None, postgres: PostgresServer | None) -> AsyncIterator[str]:
    """A database of its own for one run: on this benchmark's server, or on ``--storage``'s."""
    if postgres is not None:
        url = postgres.new_database()
        try:
            yield url
        finally:
            postgres.drop(url)
        return
    async with run_storage(storage) as section:
        yield str(section["url"])


@dataclass
class Setup:
    """One run's cluster: the emulator, the fake Telegram and the worker processes."""

    emulator: ProviderEmulator
    fake: FakeTelegramProcess
    running: list[Worker]  # by index; a worker restarted replaces its entry
    homes: list[HeraldHome]
    redis_port: int | None  # the workers' Redis (None: not clustered)


@asynccontextmanager
async def cluster(
    processes: int, *, paced: bool, database: str | None, mode: str, clustered: bool = True,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> AsyncIterator[Setup]:  # fmt: skip
    """``processes`` gateway workers on ``database`` and a Redis of their own, every one reading the
    work stream; Telegram in ``mode`` (webhook: delivered to the first process; polling: the leader's).
    ``clustered`` False: one process on ``database`` (None: its home's SQLite), without Redis.
    ``settings``: more config for every worker (:func:`write_home`)."""
    emulator = ProviderEmulator()
    with TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        redis_server = RedisServer()
        redis_server.start()
        stack.callback(redis_server.stop)
        provider = stack.enter_context(emulator.serve_in_thread())
        fake = stack.enter_context(FakeTelegramProcess())
        context = root / "project"
        context.mkdir()
        (context / "AGENTS.md").write_text(PROJECT_NOTES)  # the prompt is long enough to be cached
        ports = [free_port() for _ in range(processes)]
        homes = [
            write_home(
                root,
                index,
                provider=provider,
                telegram=fake.base_url,
                database=database,
                redis_url=redis_server.url if clustered else None,
                ports=ports,
                context=context,
                mode=mode,
                settings=settings,
            )
            for index in range(processes)
        ]
        client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=10)
        stack.callback(client.close)
        running = stack.enter_context(workers(homes, ports, fake.token, paced=paced))
        if clustered:
            names = {f"w{index}" for index in range(processes)}
            wait_until(lambda: consumers(client) >= names, "every worker reading the stream", START_TIMEOUT)
        else:
            wait_until(lambda: ready(ports[0]), "the gateway ready", START_TIMEOUT)
        yield Setup(emulator, fake, running, homes, redis_server.port if clustered else None)


def cache_efficiency(requests: list[RecordedRequest]) -> float:
    ok = [r for r in requests if r.ok]
    oracle = sum(r.oracle_tokens for r in ok)
    return sum(r.cache_read for r in ok) / oracle if oracle else 1.0


async def run(processes: int, chats: int, per_chat: int, *, paced: bool, database: str) -> list[str]:
    async with cluster(processes, paced=paced, database=database, mode="webhook") as setup:
        emulator, fake, running = setup.emulator, setup.fake, setup.running
        users = [FIRST_CHAT + n for n in range(chats)]
        sent = await fake.inject([(u, f"c{u}m{n}", QUESTION) for n in range(per_chat) for u in users])
        await settle(fake, sent, users)
        await asyncio.sleep(QUIET_AFTER)
        answers, _ = await fake.answers(users)
        per_process = [turns_answered(worker.port) for worker in running]
    check = Check.of(sent, answers)
    turns = turn_order(emulator.requests)
    once = sum(turns.count.get(m.tag, 0) == 1 for m in sent)
    earliest = first_replies(answers)
    first = [earliest[(m.chat, m.message_id)] - m.at for m in sent if (m.chat, m.message_id) in earliest]
    wall = max(earliest.values(), default=0.0) - min(m.at for m in sent)
    efficiency = cache_efficiency(emulator.requests)
    if check.problems:
        print(f"  Telegram ({processes} process(es)), first problems: {check.problems[:3]}", flush=True)
    return [
        str(processes), "PTB (30/s per process)" if paced else "lifted", str(len(sent)),
        f"{once}/{len(sent)}", f"{turns.kept()}/{chats}", check.line(),
        f"{len(first) / wall:.1f}" if wall else "-",
        ms(percentile(first, 50)) if first else "-", ms(percentile(first, 99)) if first else "-",
        " + ".join(map(str, per_process)), f"{efficiency:.3f}", "n/a",
    ]  # fmt: skip


def ready(port: int) -> bool:
    """Whether a worker's ``/readyz`` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:  # HTTPError (503) included
        return False


def role(port: int) -> str | None:
    """A worker's role in the cluster from its ``/readyz`` (None: it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            report = json.loads(response.read())
    except urllib.error.HTTPError as error:  # 503 still carries the report
        report = json.loads(error.read())
    except OSError:
        return None
    cluster = report.get("cluster") or {}
    return str(cluster.get("role")) if cluster else None


async def failover(database: str) -> list[str]:
    """3 processes, Telegram polled by the elected leader; messages arrive at a steady rate and the leader
    is SIGKILLed a third of the way through. The gap: from the kill to the first answer to a message
    sent after it (the new leader polls once the dead one's lease expired, within ``leader_ttl``)."""
    async with cluster(3, paced=False, database=database, mode="polling") as setup:
        emulator, fake, running = setup.emulator, setup.fake, setup.running
        wait_until(lambda: [role(w.port) for w in running].count("leader") == 1, "a leader", START_TIMEOUT)
        leader = next(index for index, worker in enumerate(running) if role(worker.port) == "leader")
        users = [FIRST_CHAT + n for n in range(FAILOVER_CHATS)]
        count = round(FAILOVER_SECONDS * FAILOVER_RATE)
        sent: list[Sent] = []
        killed_at = 0.0
        for n in range(count):
            user = users[n % len(users)]
            sent += await fake.inject([(user, f"c{user}m{n // len(users)}", QUESTION)])
            if n == count // 3:
                running[leader].process.kill()
                killed_at = time.monotonic()  # CLOCK_MONOTONIC: the same clock as the fake's stamps
            await asyncio.sleep(1 / FAILOVER_RATE)
        await settle(fake, sent, users)
        await asyncio.sleep(QUIET_AFTER)
        answers, _ = await fake.answers(users)
        per_process = [
            "killed" if index == leader else str(turns_answered(worker.port))
            for index, worker in enumerate(running)
        ]
    check = Check.of(sent, answers)
    turns = turn_order(emulator.requests)
    once = sum(turns.count.get(m.tag, 0) == 1 for m in sent)
    earliest = first_replies(answers)
    first = [earliest[(m.chat, m.message_id)] - m.at for m in sent if (m.chat, m.message_id) in earliest]
    after = [
        earliest[(m.chat, m.message_id)]
        for m in sent
        if m.at > killed_at and (m.chat, m.message_id) in earliest
    ]
    gap = f"{min(after) - killed_at:.1f} s (leader_ttl {LEADER_TTL:g} s)" if after else "never"
    if check.problems:
        print(f"  Telegram (failover), first problems: {check.problems[:3]}", flush=True)
    return [
        "3, leader killed", "lifted", str(len(sent)), f"{once}/{len(sent)}",
        f"{turns.kept()}/{len(users)}", check.line(), f"{FAILOVER_RATE} (sent)",
        ms(percentile(first, 50)) if first else "-", ms(percentile(first, 99)) if first else "-",
        " + ".join(per_process), f"{cache_efficiency(emulator.requests):.3f}", gap,
    ]  # fmt: skip


TAG = re.compile(r"c(\d+)m(\d+):")


@dataclass
class TurnOrder:
    """What the model was asked, in the order the requests arrived: per tag how many turns, per chat
    the message numbers in turn order."""

    count: Counter[str]
    by_chat: dict[int, list[int]]

    def kept(self) -> int:
        """Chats whose turns ran in the order of their messages."""
        return sum(numbers == sorted(numbers) for numbers in self.by_chat.values())


def turn_order(requests: list[RecordedRequest]) -> TurnOrder:
    count: Counter[str] = Counter()
    by_chat: dict[int, list[int]] = defaultdict(list)
    for request in requests:
        if not request.ok:
            continue
        found = TAG.search(json.dumps(request.json["messages"][-1]))
        if found is not None:
            count[found.group(0)[:-1]] += 1
            by_chat[int(found.group(1))].append(int(found.group(2)))
    return TurnOrder(count, by_chat)


def first_replies(answers: Answers) -> dict[tuple[int, int | None], float]:
    """Per answered message, when its first answer reached Telegram (a doubled send counts once)."""
    earliest: dict[tuple[int, int | None], float] = {}
    for chat, chat_answers in answers.items():
        for answer in chat_answers:
            key = (chat, answer.reply_to)
            if not answer.deleted and (key not in earliest or answer.first < earliest[key]):
                earliest[key] = answer.first
    return earliest


async def main_async(
    chats: int,
    per_chat: int,
    *,
    paced: bool,
    failing_over: bool,
    storage: str | None,
    postgres: PostgresServer | None,
) -> None:
    rows = []
    for pacing in (False, True) if paced else (False,):
        for processes in (1, 3):
            started = time.monotonic()
            async with fresh_database(storage, postgres) as database:
                rows.append(await run(processes, chats, per_chat, paced=pacing, database=database))
            print(f"({processes} process(es): {time.monotonic() - started:.0f} s)", flush=True)
    if failing_over:
        started = time.monotonic()
        async with fresh_database(storage, postgres) as database:
            rows.append(await failover(database))
        print(f"(failover: {time.monotonic() - started:.0f} s)", flush=True)
    print(f"\n## {chats:,} chats × {per_chat} messages\n")
    print(table(COLUMNS, rows))


def worker_main() -> None:
    """Entry point of a worker process: ``HOME TOKEN paced|unpaced``."""
    root, token, pacing = sys.argv[1:4]
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    asyncio.run(run_worker(HeraldHome(Path(root)), token, pacing == "paced"))


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200 chats instead of 1,000")
    parser.add_argument("--chats", type=int, help="chats (default 1,000; --quick 200)")
    parser.add_argument("--per-chat", type=int, default=3, help="messages per chat (default 3)")
    parser.add_argument("--paced", action="store_true", help="also run with python-telegram-bot's pacing")
    parser.add_argument(
        "--no-failover", action="store_true", help="skip the run that kills the leader (about a minute)"
    )
    parser.add_argument(
        "--storage", metavar="URL", help="a PostgreSQL database URL (default: a server of its own)"
    )
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    chats = args.chats or (200 if args.quick else 1000)
    signal.signal(signal.SIGTERM, _interrupted)  # clean up the servers and workers on SIGTERM too
    postgres = PostgresServer() if args.storage is None else None
    try:
        if postgres is not None:
            postgres.start()
        where = describe(args.storage) if args.storage else "PostgreSQL (a server of its own)"
        print(f"State: {where}; Redis (a server of its own)")
        asyncio.run(
            main_async(
                chats,
                args.per_chat,
                paced=args.paced,
                failing_over=not args.no_failover,
                storage=args.storage,
                postgres=postgres,
            )
        )
    finally:
        if postgres is not None:
            postgres.stop()


if __name__ == "__main__":
    main()
