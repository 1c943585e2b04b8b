"""What a crash or a restart costs a bot under steady traffic: the leader SIGKILLed 20 times, a rolling
restart of a 3-process cluster, and a restart of one process on SQLite.

    python -m benchmarks.cluster_restarts                # all three runs (about 8 minutes)
    python -m benchmarks.cluster_restarts --kills 5      # fewer kills
    python -m benchmarks.cluster_restarts --only kills   # one run: kills, rolling or single

The harness is ``benchmarks.cluster``'s: gateway processes of their own (``open_gateway`` as ``herald
gateway run`` opens it; SIGTERM drains and exits), the fake Telegram Bot API in a process of its own
(Telegram polled by the elected leader, ``getUpdates`` stamped on its clock), the provider emulator,
PostgreSQL and Redis servers of this run's own, and ``cluster.leader_ttl`` at its default. Each message
is ``cN mK: question`` and the model's answer names it, so every run checks: each message answered
exactly once (one Telegram answer, one turn), each chat's turns in its messages' order, and never two
``getUpdates`` callers at once.

- **kills**: 3 processes, 2 messages a second across 50 chats. ``--kills`` times: the leader is
  SIGKILLed at a random moment of its renewal cycle, and the *takeover* is the time from the kill to
  the next ``getUpdates`` Telegram sees (another process's: the dead one makes none); the killed
  process is started again before the next kill. Reported: p50 and max of the takeover.
- **rolling**: 3 processes, 5 messages a second across 100 chats; each process in turn is stopped
  with SIGTERM (it hands its leases over, drains, exits), started again, and once it is ready the next
  one is. The same traffic without restarts is the baseline. Reported: the delay from a message's
  injection to its answer's first send (p50, p99, max) with and without restarts, each process's exit
  status and stop time, and the longest pause between two ``getUpdates`` while the leader stopped.
- **single**: one process on SQLite, no cluster, 5 messages a second across 100 chats; SIGTERM, then
  started again (what ``systemctl restart`` does). Reported: the polling gap (from the SIGTERM to the
  first ``getUpdates`` of the new process), the messages that arrived meanwhile, and their delays.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.cluster import (
    FIRST_CHAT,
    QUIET_AFTER,
    START_TIMEOUT,
    Setup,
    cluster,
    first_replies,
    fresh_database,
    ready,
    role,
    settle,
    start_worker,
    turn_order,
    wait_until,
)
from benchmarks.concurrency import QUESTION
from benchmarks.fake_telegram import Check, FakeTelegramProcess, Sent
from benchmarks.gateway_harness import ms, percentile, table
from gateway.config import ClusterSettings
from tests.postgres import PostgresServer

LEADER_TTL = ClusterSettings().leader_ttl  # the default, which every run keeps
RENEW_EVERY = LEADER_TTL / 3
KILLS = 20
KILL_RATE, KILL_CHATS = 2.0, 50  # messages per second, chats
RATE, CHATS = 5.0, 100  # the rolling and single runs' traffic
BASELINE_SECONDS = 60.0
WARM_UP = 10.0  # seconds of traffic before the first stop
BETWEEN = 5.0  # seconds between one process ready again and the next stopped
COOL_DOWN = 10.0  # seconds of traffic after the last restart
STOP_TIMEOUT = 90.0  # drain_timeout (30 s) and the outbox's flush (10 s), with room


# --- traffic -----------------------------------------------------------------------------------


@dataclass
class Traffic:
    """Messages injected at ``rate`` per second, round-robin over ``chats`` chats, until stopped."""

    fake: FakeTelegramProcess
    rate: float
    chats: int
    sent: list[Sent] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def users(self) -> list[int]:
        return [FIRST_CHAT + n for n in range(self.chats)]

    async def run(self) -> None:
        users, n = self.users, 0
        began = time.monotonic()
        while not self._stop.is_set():
            user = users[n % len(users)]
            self.sent += await self.fake.inject([(user, f"c{user}m{n // len(users)}", QUESTION)])
            n += 1
            pause = began + n / self.rate - time.monotonic()  # no drift: the rate holds however slow a call
            if pause > 0:
                await asyncio.sleep(pause)

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class Outcome:
    """What became of the messages of one run."""

    once: str  # messages with exactly one Telegram answer, by the model's answer to it
    turns_once: str  # messages that reached the model exactly once
    order: str  # chats whose turns ran in their messages' order
    delays: dict[tuple[int, int], float]  # (chat, message id) -> seconds from injection to first answer
    overlaps: int  # getUpdates that arrived while another was still waiting
    problems: list[str]

    def delay_line(self, sent: list[Sent] | None = None) -> str:
        """p50 / p99 / max of the delays (of ``sent`` only, when given)."""
        keys = None if sent is None else {(m.chat, m.message_id) for m in sent}
        values = [d for k, d in self.delays.items() if keys is None or k in keys]
        if not values:
            return "-"
        return " / ".join(ms(x) for x in (percentile(values, 50), percentile(values, 99), max(values)))


async def finish(setup: Setup, traffic: Traffic, since: float) -> Outcome:
    """Let every message be answered, then check them."""
    await settle(setup.fake, traffic.sent, traffic.users)
    await asyncio.sleep(QUIET_AFTER)  # a doubled answer would show up now
    answers, _ = await setup.fake.answers(traffic.users)
    _, overlaps = await setup.fake.polls(since)
    check = Check.of(traffic.sent, answers)
    turns = turn_order(setup.emulator.requests)
    earliest = first_replies(answers)
    delays = {
        (m.chat, m.message_id): earliest[(m.chat, m.message_id)] - m.at
        for m in traffic.sent
        if (m.chat, m.message_id) in earliest
    }
    once = sum(turns.count.get(m.tag, 0) == 1 for m in traffic.sent)
    return Outcome(
        check.line(), f"{once}/{len(traffic.sent)}", f"{turns.kept()}/{len(turns.by_chat)}", delays,
        len(overlaps), check.problems,
    )  # fmt: skip


async def waiting(predicate: Callable[[], bool], what: str) -> None:
    await asyncio.to_thread(wait_until, predicate, what, START_TIMEOUT)


def longest_pause(polls: list[float], start: float, end: float) -> float:
    """The longest time without a ``getUpdates`` arriving between ``start`` and ``end``."""
    marks = [start, *(t for t in polls if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(marks))


async def next_poll(fake: FakeTelegramProcess, since: float) -> float:
    """Seconds from ``since`` to the next ``getUpdates`` (inf: none within four TTLs)."""
    deadline = since + LEADER_TTL * 4
    while time.monotonic() < deadline:
        polls, _ = await fake.polls(since)
        if polls:
            return polls[0] - since
        await asyncio.sleep(0.05)
    return float("inf")


def leader_of(setup: Setup) -> int | None:
    leaders = [index for index, worker in enumerate(setup.running) if role(worker.port) == "leader"]
    return leaders[0] if len(leaders) == 1 else None


async def restart(setup: Setup, index: int, *, ready_when: Callable[[int], bool]) -> None:
    """Start worker ``index`` again (it was stopped) and wait until ``ready_when(port)``."""
    worker = setup.running[index]
    setup.running[index] = start_worker(setup.homes[index], worker.port, setup.fake.token, paced=False)
    await waiting(lambda: ready_when(worker.port), f"worker {index} back")


# --- the runs ----------------------------------------------------------------------------------


async def kills(database: str, count: int) -> str:
    async with cluster(3, paced=False, database=database, mode="polling") as setup:
        began = time.monotonic()
        traffic = Traffic(setup.fake, KILL_RATE, KILL_CHATS)
        sending = asyncio.create_task(traffic.run())
        takeovers: list[float] = []
        for kill in range(count):
            await waiting(lambda: all(role(w.port) for w in setup.running), "every process up")
            leader = None
            while leader is None:  # a leader stalled by a loaded machine may just have stepped down
                await waiting(lambda: leader_of(setup) is not None, "one leader")
                leader = leader_of(setup)
            await asyncio.sleep(random.uniform(0, RENEW_EVERY))  # any moment of its renewal cycle
            setup.running[leader].process.kill()
            killed = time.monotonic()
            await asyncio.to_thread(setup.running[leader].process.wait, 10)
            takeovers.append(await next_poll(setup.fake, killed))
            print(f"  kill {kill + 1}: the next getUpdates {takeovers[-1]:.2f} s later", flush=True)
            await restart(setup, leader, ready_when=lambda port: role(port) is not None)
        traffic.stop()
        await sending
        outcome = await finish(setup, traffic, began)
    columns = ["kills", "takeover p50", "takeover max", "messages", "one answer each", "one turn each",
               "chat order kept", "two pollers at once", "answer delay p50 / p99 / max"]  # fmt: skip
    row = [
        str(count), f"{percentile(takeovers, 50):.2f} s", f"{max(takeovers):.2f} s", str(len(traffic.sent)),
        outcome.once, outcome.turns_once, outcome.order, str(outcome.overlaps), outcome.delay_line(),
    ]  # fmt: skip
    problems = f"\n\nfirst problems: {outcome.problems[:3]}" if outcome.problems else ""
    return f"### The leader SIGKILLed (leader_ttl {LEADER_TTL:g} s)\n\n" + table(columns, [row]) + problems


@dataclass(frozen=True)
class Stopped:
    index: int
    was_leader: bool
    at: float  # when SIGTERM was sent
    status: int | None
    took: float  # seconds from SIGTERM to its exit


async def rolling(database: str, *, restarts: bool) -> tuple[list[str], list[Stopped]]:
    async with cluster(3, paced=False, database=database, mode="polling") as setup:
        await waiting(lambda: leader_of(setup) is not None, "one leader")
        began = time.monotonic()
        traffic = Traffic(setup.fake, RATE, CHATS)
        sending = asyncio.create_task(traffic.run())
        stopped: list[Stopped] = []
        if restarts:
            await asyncio.sleep(WARM_UP)
            for index in range(len(setup.running)):
                worker = setup.running[index]
                was_leader = role(worker.port) == "leader"
                at = time.monotonic()
                worker.process.send_signal(signal.SIGTERM)
                status = await asyncio.to_thread(worker.process.wait, STOP_TIMEOUT)
                stopped.append(Stopped(index, was_leader, at, status, time.monotonic() - at))
                print(f"  w{index}{' (leader)' if was_leader else ''}: exit {status} "
                      f"{stopped[-1].took:.1f} s after SIGTERM", flush=True)  # fmt: skip
                await restart(setup, index, ready_when=lambda port: role(port) is not None and ready(port))
                await asyncio.sleep(BETWEEN)
            await asyncio.sleep(COOL_DOWN - BETWEEN)
        else:
            await asyncio.sleep(BASELINE_SECONDS)
        traffic.stop()
        await sending
        outcome = await finish(setup, traffic, began)
        polls, _ = await setup.fake.polls(began)
    gap = "-"
    handed = [s for s in stopped if s.was_leader]
    if handed:
        gap = ms(max(longest_pause(polls, s.at - 1.0, s.at + s.took + 1.0) for s in handed))
    row = [
        "rolling restart" if restarts else "no restart", str(len(traffic.sent)), outcome.once,
        outcome.turns_once, outcome.order, str(outcome.overlaps), outcome.delay_line(),
        ", ".join(f"{s.status} in {s.took:.1f} s" for s in stopped) or "-", gap,
    ]  # fmt: skip
    if outcome.problems:
        print(f"  first problems: {outcome.problems[:3]}", flush=True)
    return row, stopped


async def single() -> str:
    async with cluster(1, paced=False, database=None, mode="polling", clustered=False) as setup:
        began = time.monotonic()
        traffic = Traffic(setup.fake, RATE, CHATS)
        sending = asyncio.create_task(traffic.run())
        await asyncio.sleep(WARM_UP)
        worker = setup.running[0]
        stopping = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        status = await asyncio.to_thread(worker.process.wait, STOP_TIMEOUT)
        took = time.monotonic() - stopping
        await restart(setup, 0, ready_when=ready)
        await asyncio.sleep(COOL_DOWN)
        traffic.stop()
        await sending
        outcome = await finish(setup, traffic, began)
        polls, _ = await setup.fake.polls(stopping + took)
    first_poll = polls[0] if polls else float("inf")
    during = [m for m in traffic.sent if stopping <= m.at < first_poll]
    columns = ["messages", "one answer each", "one turn each", "chat order kept", "exit", "stopped in",
               "polling gap", "arrived in the gap", "their delay p50 / p99 / max",
               "all: p50 / p99 / max"]  # fmt: skip
    row = [
        str(len(traffic.sent)), outcome.once, outcome.turns_once, outcome.order, str(status), f"{took:.1f} s",
        f"{first_poll - stopping:.1f} s", str(len(during)), outcome.delay_line(during), outcome.delay_line(),
    ]  # fmt: skip
    problems = f"\n\nfirst problems: {outcome.problems[:3]}" if outcome.problems else ""
    return "### One process on SQLite, SIGTERM and started again\n\n" + table(columns, [row]) + problems


async def main_async(runs: list[str], count: int, postgres: PostgresServer) -> None:
    out = []
    if "kills" in runs:
        async with fresh_database(None, postgres) as database:
            out.append(await kills(database, count))
    if "rolling" in runs:
        rows = []
        for restarts in (False, True):
            async with fresh_database(None, postgres) as database:
                rows.append((await rolling(database, restarts=restarts))[0])
        columns = ["run", "messages", "one answer each", "one turn each", "chat order kept",
                   "two pollers at once", "answer delay p50 / p99 / max", "exit status, stop time",
                   "longest getUpdates pause (leader stopped)"]  # fmt: skip
        title = f"### Rolling restart of 3 processes, {RATE:g} messages/s across {CHATS} chats"
        out.append(f"{title}\n\n" + table(columns, rows))
    if "single" in runs:
        out.append(await single())
    print("\n\n".join(["", *out]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=KILLS, help=f"leader kills (default {KILLS})")
    parser.add_argument("--only", choices=["kills", "rolling", "single"], help="one run only")
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    postgres = PostgresServer()
    postgres.start()
    try:
        runs = [args.only] if args.only else ["kills", "rolling", "single"]
        asyncio.run(main_async(runs, args.kills, postgres))
    finally:
        postgres.stop()


if __name__ == "__main__":
    main()
