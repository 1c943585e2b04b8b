"""What a failover costs: a chat whose model is overloaded for a while, through the real SDKs against the
offline emulator (its clock is the agent's, so outages and probe intervals pass without waiting).

    python -m benchmarks.failover

A chat (claude-sonnet-4-6, the default ``cache_ttl: auto``, a project file so the prompt is cached) takes
8 turns; then its model answers 529 for the outage's length. The person sends 3 messages at its start
(answered by the fallback model), none for the rest of it, and one as it ends (the fallback again; it
starts the probe that finds the primary back); then 3 more, answered by the primary. Per fallback model
and outage length it prints the input tokens and dollars of: a steady request on the primary before the
outage, the first and second request to the fallback, the probe, and the first and second request back
on the primary (does the primary's cache survive the outage?).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from contextlib import chdir
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.models import lookup_model
from agent.usage import Usage, cost
from benchmarks.cache import PROJECT_NOTES, USER_TEXT, WALL_START, spec
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.emulator import ProviderEmulator, RecordedRequest, Reply
from tests.fakes.waiting import wait_until
from tests.helpers import run_turn

PRIMARY = "claude-sonnet-4-6"
PROBE_INTERVAL = 30.0
TURNS_BEFORE = 8
FALLBACKS = {
    "claude-haiku-4-5 (same provider)": {"provider": "anthropic", "name": "claude-haiku-4-5"},
    "gpt-5-mini (OpenAI-compatible)": {
        "provider": "openai",
        "name": "gpt-5-mini",
        "api_key_env": "FALLBACK_KEY",
    },
}
# seconds: the history's 5-minute cache entry survives it; it does not; the 1-hour one does not either
OUTAGES = (2 * 60, 10 * 60, 90 * 60)


@dataclass(frozen=True)
class Measured:
    """One answered request: its model, input tokens by kind, and what its input cost."""

    label: str
    model: str
    prompt: int
    read: int
    write: int
    dollars: float

    @classmethod
    def of(cls, label: str, request: RecordedRequest) -> Measured:
        write_1h = request.cache_write_1h
        uncached = request.prompt_tokens - request.cache_read - request.cache_write
        usage = Usage(uncached, 0, request.cache_read, request.cache_write - write_1h, write_1h)
        price = lookup_model(request.model)
        return cls(label, request.model, request.prompt_tokens, request.cache_read, request.cache_write,
                   cost(usage, price))  # fmt: skip


def is_probe(request: RecordedRequest) -> bool:
    return request.json.get("max_tokens", request.json.get("max_completion_tokens")) == 1


def config(url: str, fallback: dict[str, Any]) -> HeraldConfig:
    entry = dict(fallback)
    if entry["provider"] == "openai":
        entry["base_url"] = url + "/v1"
    return HeraldConfig.model_validate(
        {
            "model": {
                "provider": "anthropic",
                "name": PRIMARY,
                "base_url": url,
                "max_tokens": 2000,
                "retry_base_delay": 0.0,  # the 529s are not billed; their waiting is not what is measured
                "fallbacks": [entry],
                "fallback_probe_interval": PROBE_INTERVAL,
            },
            "agent": {"context_dir": str(Path.cwd())},
        }
    )


async def chat(emulator: ProviderEmulator, runtime: Runtime, outage: float) -> list[Measured]:
    runtime.agent.clock = lambda: WALL_START + emulator.clock.now()
    session = (await runtime.new_session(spec())).record
    number = 0

    async def turn() -> RecordedRequest:
        nonlocal number
        emulator.script(Reply(text_tokens=250))
        result = await run_turn(runtime, session, f"Turn {number}: {USER_TEXT}")
        if result.error:
            raise RuntimeError(result.error)
        number += 1
        emulator.clock.advance(20)  # a person reading and typing
        return [r for r in emulator.requests if r.ok and not is_probe(r)][-1]

    for _ in range(TURNS_BEFORE):
        steady = await turn()
    emulator.fail_for(outage, 529, model=PRIMARY)
    first, second, _ = [await turn() for _ in range(3)]
    emulator.clock.advance(outage)  # quiet until the outage is over, and the probe interval with it
    await turn()  # answered by the fallback; starts the probe
    primary = runtime.pool.for_session("anthropic", PRIMARY)
    failover = runtime.agent.calls.failover
    assert failover is not None
    await wait_until(lambda: failover.outage(primary) is None, what="the probe to find the primary back")
    [probe] = [r for r in emulator.requests if r.ok and is_probe(r)]
    back, again = await turn(), await turn()
    return [
        Measured.of("steady, on the primary", steady),
        Measured.of("1st on the fallback", first),
        Measured.of("2nd on the fallback", second),
        Measured.of("probe", probe),
        Measured.of("1st back on the primary", back),
        Measured.of("2nd back on the primary", again),
    ]


async def measure(fallback: dict[str, Any], outage: float) -> list[Measured]:
    emulator = ProviderEmulator()
    with tempfile.TemporaryDirectory() as tmp:
        home = HeraldHome(Path(tmp) / "home")
        ensure_home(home)
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "AGENTS.md").write_text(PROJECT_NOTES)
        with chdir(work):
            async with emulator.serve() as url, open_agent_runtime(config(url, fallback), home) as runtime:
                return await chat(emulator, runtime, outage)


def table(rows: list[tuple[str, str, Measured]]) -> str:
    columns = ["fallback", "outage", "request", "prompt tokens", "cache read", "cache write", "input $"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for fallback, outage, m in rows:
        lines.append(
            f"| {fallback} | {outage} | {m.label} | {m.prompt:,} | {m.read:,} | {m.write:,} "
            f"| {m.dollars:.5f} |"
        )
    return "\n".join(lines)


async def main_async() -> str:
    rows = []
    for name, fallback in FALLBACKS.items():
        for outage in OUTAGES:
            for measured in await measure(fallback, outage):
                rows.append((name, f"{outage // 60:g} min", measured))
    return table(rows)


def main() -> None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    os.environ.setdefault("FALLBACK_KEY", "benchmark")
    print(asyncio.run(main_async()))


if __name__ == "__main__":
    main()
