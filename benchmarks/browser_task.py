"""What a ten-step browsing task costs in tokens, with and without prompt caching.

    python -m benchmarks.browser_task

A scripted model (tests/browsing.py) signs in, orders a book and reads a list a script renders on the
local test site (tests/fakes/site.py), taking each ref from the snapshot it was just given: ten calls
of the real browser tools (Debian's Chromium) in one turn, through the real runtime and SDKs against the
offline provider emulator. Per model it prints the requests, the prompt tokens, what the cache read and
wrote, and the input cost as paid (with caching) against the same prompts sent uncached. Needs
``/usr/bin/chromium``; no network beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent.models import lookup_model
from agent.settings import DEFAULT_TOOLSETS
from agent.usage import Usage, cost, uncached_cost
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from gateway.wiring.runtime import open_agent_runtime
from tests.browsing import BrowsingModel, Step, ten_steps
from tests.emulator import ProviderEmulator, RecordedRequest
from tests.fakes.site import Site
from tests.helpers import SPEC, run_turn

TASK = "Sign in to the bird site as alice, order the hardback, then tell me today's sightings."


@dataclass(frozen=True)
class Variant:
    api: str
    model: str


VARIANTS = (Variant("anthropic", "claude-sonnet-4-6"), Variant("openai", "gpt-5"))


def heavy_steps(base: str) -> list[Step]:
    """A page of 3,000 links: its first part (cut at web.browser.max_snapshot_chars), then the next nine
    parts (browser_snapshot with start)."""
    return [
        Step("browser_navigate", {"url": f"{base}/big"}),
        *[Step("browser_snapshot", {}, start_from=True)] * 9,
    ]


TASKS = {"sign in, order, read a list": ten_steps, "a 3,000-link page, read in 10 parts": heavy_steps}


@dataclass
class Run:
    task: str
    variant: Variant
    requests: list[RecordedRequest]
    tool_chars: int  # characters of browser results the model was given
    answer: str

    def row(self) -> str:
        ok = [r for r in self.requests if r.ok]
        prompt = sum(r.prompt_tokens for r in ok)
        read = sum(r.cache_read for r in ok)
        write_1h = sum(r.cache_write_1h for r in ok)
        write_5m = sum(r.cache_write for r in ok) - write_1h
        price = lookup_model(self.variant.model)
        inputs = Usage(prompt - read - write_5m - write_1h, 0, read, write_5m, write_1h)
        paid, uncached = cost(inputs, price), uncached_cost(inputs, price)
        return (
            f"| {self.task} | {self.variant.api} {self.variant.model} | {len(ok)} | {prompt:,} "
            f"| {self.tool_chars:,} | {read:,} | {write_5m + write_1h:,} | ${paid:.4f} | ${uncached:.4f} "
            f"| {paid / uncached:.2f} |"
        )


HEADER = (
    "| task | model | requests | prompt tokens | browser result chars | cache read | cache write "
    "| input cost, cached | input cost, uncached | ratio |\n|---|---|---|---|---|---|---|---|---|---|"
)


def config(url: str, variant: Variant) -> HeraldConfig:
    return HeraldConfig.model_validate(
        {
            "model": {
                "provider": variant.api,
                "name": variant.model,
                "base_url": url if variant.api == "anthropic" else url + "/v1",
                "max_tokens": 2000,
            },
            "agent": {"toolsets": [*DEFAULT_TOOLSETS, "browser"]},
            "web": {"allow_private": True},  # the site is on 127.0.0.1; the session is the owner's
        }
    )


async def run(task: str, variant: Variant) -> Run:
    emulator = ProviderEmulator()
    async with Site().serve() as site, emulator.serve() as url:
        with tempfile.TemporaryDirectory() as tmp:
            home = HeraldHome(Path(tmp) / "home")
            ensure_home(home)
            model = BrowsingModel(TASKS[task](site.inside.url), answer="Done.")
            emulator.responder = model
            async with open_agent_runtime(config(url, variant), home) as runtime:
                session = (await runtime.new_session(SPEC)).record
                result = await run_turn(runtime, session, TASK)
    if result.text != model.answer:
        raise SystemExit(f"the task did not finish: {result.text or result.error}")
    return Run(task, variant, list(emulator.requests), sum(len(text) for text in model.results), result.text)


async def main_async() -> str:
    rows = [(await run(task, variant)).row() for task in TASKS for variant in VARIANTS]
    return "\n".join([HEADER, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # the emulator takes any key
    os.environ.setdefault("OPENAI_API_KEY", "benchmark")
    print(asyncio.run(main_async()))


if __name__ == "__main__":
    main()
