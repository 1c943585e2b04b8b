"""Half price for work that can wait: a daily digest job over 30 days, with and without the batch API.

    python -m benchmarks.batch_digest            # 30 days, Anthropic and OpenAI
    python -m benchmarks.batch_digest --days 7

Each simulated day the job's run answers its prompt in its own session, as the cron runner does
(purpose "cron"): a tool round (it checks its list) and then the digest, so the run's second request
reads the prefix its first one wrote. With ``batch`` the run sits inside ``agent.batching`` (as a job
marked ``batch: true`` does) and every request goes through the emulator's batch endpoints. The clock is
virtual (the emulator's, a day per run): nothing waits. The emulator processes a batch at its first poll,
so a run's second request follows its first within the cache's TTL, as it does when a provider answers a
batch within minutes. Cost is what Herald recorded (its own prices, halved for batch requests); cache
read tokens are what the provider reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from contextlib import chdir
from dataclasses import dataclass
from pathlib import Path

from agent.batching.mode import Batching, batching
from benchmarks.cache import PROJECT_NOTES, Bench, Variant, spec
from gateway.home import HeraldHome, ensure_home
from resilience.backoff import Backoff
from tests.emulator import ProviderEmulator, Reply, ToolUse

DAY = 86_400.0
PROMPT = "Write today's digest: what changed in the project, what needs attention, what can wait."
NO_WAIT = Backoff(first=0.0, cap=0.0)  # polls on the virtual clock: the emulator ends a batch when polled


@dataclass(frozen=True)
class Outcome:
    label: str
    batch: bool
    requests: int
    batch_requests: int
    prompt_tokens: int
    cache_read: int
    cost: float


async def digest_days(bench: Bench, days: int, batch: bool) -> Outcome:
    """``days`` runs of the digest job, a day apart; what Herald recorded."""
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        road = runtime.agent.calls.batches
        assert road is not None
        road.polls = NO_WAIT
        session_id = (await runtime.new_session(spec())).record.id
        for day in range(days):
            todos = [{"id": str(day), "content": f"read the news of day {day}", "status": "completed"}]
            bench.emulator.script(
                Reply(tool_calls=[ToolUse("todo", {"todos": todos, "merge": True})]), Reply(text_tokens=300)
            )
            session = await runtime.store.sessions.get(session_id)
            assert session is not None
            mode = Batching(deadline=runtime.agent.clock() + 7200.0, run=f"bench:{day}") if batch else None
            async with runtime.locks.hold(session.session_key) as lease:
                with batching(mode):
                    result = await runtime.agent.run_turn(lease, session, PROMPT, purpose="cron")
            if result.error:
                raise RuntimeError(result.error)
            bench.emulator.clock.advance(DAY)
        purposes = await runtime.store.usage.by_purpose()
    ok = [r for r in bench.emulator.requests if r.ok]
    return Outcome(
        label=bench.variant.label,
        batch=batch,
        requests=sum(p.requests for p in purposes),
        batch_requests=sum(1 for r in ok if r.batch),
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        cache_read=sum(r.cache_read for r in ok),
        cost=sum(p.cost for p in purposes),
    )


async def measure(variant: Variant, days: int, batch: bool) -> Outcome:
    emulator = ProviderEmulator()
    with tempfile.TemporaryDirectory() as tmp:
        home = HeraldHome(Path(tmp) / "home")
        ensure_home(home)
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "AGENTS.md").write_text(PROJECT_NOTES)
        with chdir(work):
            async with emulator.serve() as url:
                bench = Bench(emulator, url, home, variant)
                return await digest_days(bench, days, batch)


VARIANTS = (
    Variant("anthropic", "claude-sonnet-4-6", "layered", "auto"),
    Variant("openai", "gpt-4.1", "layered", "auto"),
)


def table(rows: list[tuple[Outcome, Outcome]], days: int) -> str:
    lines = [
        f"Daily digest job, {days} days (2 requests a run), virtual clock; cost as Herald records it",
        "",
        "| provider | sent | requests (batch) | prompt tokens | cache read | hit ratio | cost USD | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for normal, batched in rows:
        for outcome in (normal, batched):
            ratio = outcome.cost / normal.cost if normal.cost else 0.0
            hit = outcome.cache_read / outcome.prompt_tokens if outcome.prompt_tokens else 0.0
            lines.append(
                f"| {outcome.label} | {'batch' if outcome.batch else 'normal'} | "
                f"{outcome.requests} ({outcome.batch_requests}) | {outcome.prompt_tokens:,} | "
                f"{outcome.cache_read:,} | {hit:.1%} | {outcome.cost:.4f} | {ratio:.2f} |"
            )
    return "\n".join(lines)


async def main_async(days: int) -> str:
    rows = []
    for variant in VARIANTS:
        rows.append((await measure(variant, days, False), await measure(variant, days, True)))
    return table(rows, days)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=30, help="simulated days (default 30)")
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    os.environ.setdefault("OPENAI_API_KEY", "benchmark")
    print(asyncio.run(main_async(args.days)))


if __name__ == "__main__":
    main()

