"""Spend limits under concurrency: do many long requests sent at the same moment stay within them?

    python -m benchmarks.spend_overshoot                       # 12, 50 and 200 at once, on each backend
    python -m benchmarks.spend_overshoot --people 12 50        # fewer
    python -m benchmarks.spend_overshoot --backends sqlite     # one backend (sqlite, postgresql, cluster)

The issue's case: ``budgets: {bot: {daily_usd: 0.10}, person: {daily_usd: 0.05}}``, and N people each
send a long request (about 2,800 tokens with the system prompt, ``model.max_tokens`` 8,000, so one answer
can cost $0.12 on claude-sonnet-4-6) at the same moment. Every answer the emulator gives runs to the
request's ``max_tokens``: each request costs the most it can. Real turns (``Agent.run_turn``, the
anthropic SDK against the offline emulator, each person in a chat of their own), charged as a chat's
turn is: to the bot and the person. ``agent.max_concurrent_requests`` is N, so all are in flight at once.

- **sqlite**, **postgresql**: one process (the spend figures in its memory).
- **cluster**: three processes sharing PostgreSQL and Redis (``cluster.redis_url``: the figures in
  Redis), N/3 people each, started together.

Reported: what the bot and the fullest person spent against their limits (a share above 100% is an
overshoot), how many model requests reached the provider, how many people got an answer (perhaps cut
short by what was left) and how many got none (refused before anything was sent, or when their cut-off
answer asked for a continuation), and the wall time of the burst. PostgreSQL and Redis are servers of
this run's own (as the tests start them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent.session import SessionSpec
from agent.spending.charge import Charge, Limit, Scope, charging
from agent.spending.windows import day_window
from benchmarks.gateway_harness import table
from benchmarks.storage import run_storage
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.emulator import ProviderEmulator, Reply
from tests.postgres import PostgresServer
from tests.redis_server import RedisServer

BOT_LIMIT = 0.10
PERSON_LIMIT = 0.05
MAX_TOKENS = 8000
LONG = "Please explain, in as much detail as you can, how a spend limit should work. " * 40
PROCESSES = 3
COLUMNS = ["backend", "at once", "bot spent (of $0.10)", "bot share", "fullest person (of $0.05)",
           "requests sent", "answered", "no answer", "burst"]  # fmt: skip
BOT = Scope("bot", "", (Limit("day", BOT_LIMIT),))


def person(number: int) -> Scope:
    return Scope("person", f"bench:{number}", (Limit("day", PERSON_LIMIT),))


def config_of(provider: str, storage: dict[str, Any], redis_url: str | None, people: int) -> dict[str, Any]:
    sections: dict[str, Any] = {
        "model": {"provider": "anthropic", "name": "claude-sonnet-4-6", "base_url": provider,
                  "max_tokens": MAX_TOKENS, "retry_base_delay": 0.01},
        "agent": {"max_concurrent_requests": people},
        "storage": storage,
    }  # fmt: skip
    if redis_url is not None:
        sections["cluster"] = {"redis_url": redis_url}
    return sections


async def turn(runtime: Runtime, number: int, start: float) -> str:
    spec = SessionSpec(session_key=f"bench:chat:{number}", source="bench", platform="terminal",
                       memory_scope="owner")  # fmt: skip
    session = (await runtime.new_session(spec)).record
    await asyncio.sleep(max(0.0, start - time.time()))  # every process's turns start together
    with charging(Charge((BOT, person(number)))):
        async with runtime.locks.hold(session.session_key) as lease:
            result = await runtime.agent.run_turn(lease, session, LONG)
    return "answered" if result.text else "refused" if result.refused is not None else "failed"
    # (a turn whose answer was cut off, and whose continuation a limit then refused, is "refused" too)


async def run_people(sections: dict[str, Any], root: Path, numbers: Sequence[int], start: float) -> list[str]:
    home = HeraldHome(root)
    ensure_home(home)
    async with open_agent_runtime(HeraldConfig.model_validate(sections), home) as runtime:
        return await asyncio.gather(*(turn(runtime, number, start) for number in numbers))


async def spent(sections: dict[str, Any], root: Path, people: int) -> tuple[float, float]:
    """What the bot and the fullest person spent today."""
    home = HeraldHome(root)
    ensure_home(home)
    async with open_agent_runtime(HeraldConfig.model_validate(sections), home) as runtime:
        period = day_window(time.time(), runtime.spending.zone).id
        keys = [(BOT.key, period), *((person(number).key, period) for number in range(people))]
        found = await runtime.store.spending.spent(keys)
    return found.get(keys[0], 0.0), max((found.get(key, 0.0) for key in keys[1:]), default=0.0)


def in_processes(sections: dict[str, Any], tmp: Path, people: int) -> list[str]:
    """The people split over :data:`PROCESSES` processes that start their turns at the same moment."""
    start = time.time() + 8.0  # time for each process to open its runtime and its sessions
    workers = []
    for index in range(PROCESSES):
        numbers = list(range(index, people, PROCESSES))
        job = json.dumps({"sections": sections, "root": str(tmp / f"home{index}"), "numbers": numbers,
                          "start": start})  # fmt: skip
        workers.append(subprocess.Popen([sys.executable, "-m", "benchmarks.spend_overshoot", "--worker", job],
                                        stdout=subprocess.PIPE, env=os.environ))  # fmt: skip
    outcomes: list[str] = []
    for worker in workers:
        out, _ = worker.communicate(timeout=600)
        if worker.returncode != 0:
            raise RuntimeError(f"a worker process failed (exit {worker.returncode})")
        outcomes.extend(json.loads(out.decode().strip().splitlines()[-1]))
    return outcomes


async def measure(
    backend: str, people: int, emulator: ProviderEmulator, provider: str, postgres: str, redis_url: str
) -> list[str]:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        async with run_storage(None if backend == "sqlite" else postgres) as storage:
            sections = config_of(provider, storage, redis_url if backend == "cluster" else None, people)
            if backend == "cluster":  # the figures of an earlier run are not this run's
                async with Redis.from_url(redis_url) as redis:
                    await redis.flushdb()
            began, sent = time.monotonic(), len(emulator.requests)
            if backend == "cluster":
                outcomes = await asyncio.to_thread(in_processes, sections, tmp, people)
            else:
                outcomes = await run_people(sections, tmp / "home", range(people), time.time())
            burst, sent = time.monotonic() - began, len(emulator.requests) - sent
            bot, fullest = await spent(sections, tmp / "home", people)
    return [backend, str(people), f"${bot:.4f}", f"{bot / BOT_LIMIT:.0%}", f"${fullest:.4f}",
            str(sent), str(outcomes.count("answered")), str(people - outcomes.count("answered")),
            f"{burst:.1f} s"]  # fmt: skip


def worker(job: str) -> None:
    given = json.loads(job)
    root, numbers, start = Path(given["root"]), given["numbers"], given["start"]
    outcomes = asyncio.run(run_people(given["sections"], root, numbers, start))
    print(json.dumps(outcomes))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--people", type=int, nargs="+", default=[12, 50, 200], help="people at once")
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql", "cluster"],
                        choices=["sqlite", "postgresql", "cluster"])  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one process of the cluster
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench-key")
    if args.worker is not None:
        worker(args.worker)
        return
    emulator = ProviderEmulator()
    emulator.responder = lambda body, api: Reply(text_tokens=3 * MAX_TOKENS)  # every answer to max_tokens
    rows = []
    with ExitStack() as servers:
        provider = servers.enter_context(emulator.serve_in_thread())
        postgres = redis_url = ""
        if set(args.backends) & {"postgresql", "cluster"}:
            server = PostgresServer()
            server.start()
            servers.callback(server.stop)
            postgres = server.url("postgres")
        if "cluster" in args.backends:
            redis_server = RedisServer()
            redis_server.start()
            servers.callback(redis_server.stop)
            redis_url = redis_server.url
        for backend in args.backends:
            for people in args.people:
                rows.append(asyncio.run(measure(backend, people, emulator, provider, postgres, redis_url)))
                print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(f"bot ${BOT_LIMIT:.2f} a day, each person ${PERSON_LIMIT:.2f}; claude-sonnet-4-6, max_tokens "
          f"{MAX_TOKENS:,}, every answer runs to it\n")  # fmt: skip
    print(table(COLUMNS, rows))


if __name__ == "__main__":
    main()
