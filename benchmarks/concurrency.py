"""Many sessions at once: 300 turns across 300 sessions against the emulator in its own process.

The sessions exist before the clock starts (a gateway's chats have their sessions already); then every
one of them gets a message at the same moment.

    python -m benchmarks.concurrency                  # 300 sessions, caps 32 and 300, two stream speeds
    python -m benchmarks.concurrency --sessions 100   # smaller

For each run it prints: turns answered, wall time, turn latency p50/p99, the longest event-loop stall
(a 5 ms ticker's worst lateness while the turns run) and two limits for the same number of streamed
requests sent at once without Herald: with a bare HTTP client (the emulator's own limit) and through
the anthropic SDK alone with a session's real prompt and tools (so ``wall ÷ SDK alone`` is what
Herald adds on top of the SDK it must use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, chdir, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from agent.memory import user_scope
from agent.session import SessionSpec
from agent.store import SessionRecord
from benchmarks.storage import describe, run_storage
from gateway.config import HeraldConfig
from gateway.heap import freeze_startup_heap
from gateway.home import HeraldHome, ensure_home
from gateway.wiring.runtime import Runtime, open_agent_runtime

TICK = 0.005
QUESTION = "please summarise the plan in a few sentences " * 4


@dataclass(frozen=True)
class Row:
    sessions: int
    cap: int
    stream_delay: float
    answered: int
    in_order: int
    wall: float
    limit: float
    sdk: float
    p50: float
    p99: float
    stall: float

    def line(self) -> str:
        return (
            f"| {self.sessions} | {self.cap} | {self.stream_delay * 1000:.0f} ms | {self.answered} "
            f"| {self.in_order} | {self.wall:.2f} s | {self.limit:.2f} s | {self.sdk:.2f} s "
            f"| {self.wall / self.sdk:.2f} | {self.p50 * 1000:.0f} ms | {self.p99 * 1000:.0f} ms "
            f"| {self.stall * 1000:.1f} ms |"
        )


HEADER = (
    "| sessions | cap | stream delay | answered | history in order | wall | bare HTTP client | SDK alone "
    "| wall ÷ SDK alone | turn p50 | turn p99 | longest loop stall |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def emulator_process(stream_delay: float) -> Iterator[str]:
    """``python -m tests.emulator`` in a process of its own; yields its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.emulator",
            "--port",
            str(port),
            "--quiet",
            "--stream-delay",
            str(stream_delay),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the start-up line: the server is listening
        if "provider emulator at" not in line:
            raise RuntimeError(f"the emulator did not start: {line!r}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


class StallMeter:
    """The worst lateness of a ticker that wants to wake every ``TICK`` seconds."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            self.worst = max(self.worst, time.perf_counter() - before - TICK)

    @asynccontextmanager
    async def measuring(self) -> AsyncIterator[StallMeter]:
        self._task = asyncio.create_task(self._tick())
        try:
            yield self
        finally:
            self._task.cancel()


async def sdk_limit(url: str, sessions: int, session: SessionRecord) -> float:
    """Wall time of ``sessions`` streamed requests at once through the anthropic SDK alone: the same
    system prompt and tools as a Herald session, no agent, no database."""
    import anthropic

    client = anthropic.AsyncAnthropic(api_key="benchmark", base_url=url, max_retries=0)
    system = [{"type": "text", "text": text} for _, text in session.system_prompt.layers()]

    async def one(number: int) -> None:
        stream = await client.messages.create(
            model=session.model,
            max_tokens=4096,
            system=system,  # type: ignore[arg-type]
            tools=session.tools,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": [{"type": "text", "text": f"chat {number}: {QUESTION}"}]}],
            stream=True,
        )
        async for _ in stream:  # type: ignore[union-attr]
            pass

    try:
        started = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(sessions)))
        return time.perf_counter() - started
    finally:
        await client.close()


async def raw_limit(url: str, sessions: int) -> float:
    """Wall time of ``sessions`` streamed requests at once, straight at the emulator, no agent."""
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "stream": True,
        "system": [{"type": "text", "text": "You are a helpful assistant."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}],
    }
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def one() -> None:
            async with client.post(f"{url}/v1/messages", data=json.dumps(body)) as response:
                async for _ in response.content.iter_any():
                    pass

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(sessions)))
        return time.perf_counter() - started


def spec(number: int) -> SessionSpec:
    return SessionSpec(
        session_key=f"bench:{number}",
        source="bench",
        platform="telegram",
        memory_scope=user_scope("bench", str(number)),
    )


async def timed_turn(runtime: Runtime, session: SessionRecord, number: int) -> tuple[float, bool, bool]:
    """(latency, answered, history in order) of one turn."""
    text = f"chat {number}: {QUESTION}"
    started = time.perf_counter()
    async with runtime.locks.hold(session.session_key) as lease:
        result = await runtime.agent.run_turn(lease, session, text)
    latency = time.perf_counter() - started
    history = await runtime.store.messages.load(session.id)
    in_order = [(m.role, m.content) for m in history] == [("user", text), ("assistant", result.text)]
    return latency, result.error is None, in_order


async def run_one(sessions: int, cap: int, stream_delay: float, storage: str | None = None) -> Row:
    async with run_storage(storage) as state:
        return await _run_one(sessions, cap, stream_delay, state)


async def _run_one(sessions: int, cap: int, stream_delay: float, state: dict[str, Any]) -> Row:
    with tempfile.TemporaryDirectory() as tmp, emulator_process(stream_delay) as url:
        home = HeraldHome(Path(tmp) / "home")
        ensure_home(home)
        config = HeraldConfig.model_validate(
            {
                "storage": state,
                "model": {"base_url": url, "max_retries": 0},
                "agent": {"max_concurrent_requests": cap},
            }
        )
        limit = await raw_limit(url, sessions)
        with chdir(tmp):
            async with open_agent_runtime(config, home) as runtime:
                freeze_startup_heap()  # as `herald gateway run` does once it has started
                chats = [(await runtime.new_session(spec(n))).record for n in range(sessions)]
                sdk = await sdk_limit(url, sessions, chats[0])
                meter = StallMeter()
                async with meter.measuring():
                    started = time.perf_counter()
                    outcomes = await asyncio.gather(*(timed_turn(runtime, s, n) for n, s in enumerate(chats)))
                    wall = time.perf_counter() - started
    latencies = sorted(latency for latency, _, _ in outcomes)
    return Row(
        sessions=sessions,
        cap=cap,
        stream_delay=stream_delay,
        answered=sum(1 for _, answered, _ in outcomes if answered),
        in_order=sum(1 for _, _, in_order in outcomes if in_order),
        wall=wall,
        limit=limit,
        sdk=sdk,
        p50=statistics.median(latencies),
        p99=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        stall=meter.worst,
    )


async def main_async(sessions: int, storage: str | None = None) -> str:
    rows = []
    for stream_delay in (0.0, 0.01):
        for cap in (16, 32, sessions):
            rows.append(await run_one(sessions, cap, stream_delay, storage))
    return "\n".join([f"State: {describe(storage)}", "", HEADER, *(row.line() for row in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument(
        "--storage", metavar="URL", help="postgresql://USER@HOST:PORT/DB: a fresh database per run there"
    )
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    print(asyncio.run(main_async(args.sessions, args.storage)))


if __name__ == "__main__":
    main()
