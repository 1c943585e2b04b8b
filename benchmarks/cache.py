"""Prompt-cache benchmark: scripted sessions through the real SDKs against the offline emulator.

    python -m benchmarks.cache               # every scenario, both APIs, both breakpoint policies
    python -m benchmarks.cache --quick       # fewer turns

Per scenario it prints requests, prompt tokens, cache read / write, hit ratio (read ÷ prompt
tokens), efficiency (read ÷ what an oracle could have read: the longest prefix any earlier request
had already sent) and the input-cost ratio against sending everything uncached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import chdir
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from adapters.terminal import TerminalAdapter
from agent.memory import OWNER_SCOPE
from agent.models import lookup_model
from agent.prompt import SystemPrompt
from agent.session import SessionSpec
from agent.side import (
    CHILD_PREAMBLE,
    NEVER_IN_CHILDREN,
    REVIEW,
    REVIEW_TASK,
    REVIEW_TOOLS,
    SUBAGENT,
    SideTask,
    review,
    run_side_task,
)
from agent.store import SessionRecord
from agent.usage import Usage, cost, uncached_cost
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.helpers import ChatResponder, is_summary_request, run_turn

PROJECT_NOTES = "# Project notes\n\n" + "".join(
    f"- Convention {i}: modules stay small, names are precise, and every public function is typed.\n"
    for i in range(60)
)
USER_TEXT = "please go through the next part of the plan and tell me what could go wrong, " * 5
WALL_START = 1_800_000_000.0  # the agent's clock follows the emulator's, from this epoch


@dataclass(frozen=True)
class Variant:
    api: str  # "anthropic" | "openai"
    model: str
    policy: str  # "layered" | "system_and_3"
    ttl: str  # "auto" | "5m" | "1h"

    @property
    def label(self) -> str:
        if self.api == "openai":
            return f"openai {self.model}"
        return f"anthropic {self.policy} ttl={self.ttl}"


@dataclass
class Result:
    scenario: str
    variant: Variant
    requests: list[RecordedRequest]

    def row(self) -> dict[str, Any]:
        ok = [r for r in self.requests if r.ok]
        prompt = sum(r.prompt_tokens for r in ok)
        read = sum(r.cache_read for r in ok)
        write_5m = sum(r.cache_write - r.cache_write_1h for r in ok)
        write_1h = sum(r.cache_write_1h for r in ok)
        oracle = sum(r.oracle_tokens for r in ok)
        price = lookup_model(self.variant.model)
        # input only (no output tokens): what caching changes
        inputs = Usage(prompt - read - write_5m - write_1h, 0, read, write_5m, write_1h)
        uncached, paid = uncached_cost(inputs, price), cost(inputs, price)
        return {
            "scenario": self.scenario,
            "variant": self.variant.label,
            "requests": len(ok),
            "prompt": prompt,
            "read": read,
            "write": write_5m + write_1h,
            "hit": read / prompt if prompt else 0.0,
            "efficiency": read / oracle if oracle else 1.0,
            "cost": paid / uncached if uncached else 1.0,
        }


class Bench:
    """One emulator + one HERALD_HOME; opens runtimes (processes, in effect) on demand."""

    def __init__(
        self,
        emulator: ProviderEmulator,
        url: str,
        home: HeraldHome,
        variant: Variant,
        storage: dict[str, Any] | None = None,
    ) -> None:
        self.emulator, self.url, self.home, self.variant = emulator, url, home, variant
        self.storage = storage or {}  # the ``storage`` section: {} is state.db in the home

    def config(self, context_length: int | None = None) -> HeraldConfig:
        base = self.url if self.variant.api == "anthropic" else self.url + "/v1"
        return HeraldConfig.model_validate(
            {
                "model": {
                    "provider": self.variant.api,
                    "name": self.variant.model,
                    "base_url": base,
                    "context_length": context_length,
                    "max_tokens": 2000,
                },
                "agent": {"context_dir": str(Path.cwd())},
                "prompt_caching": {"policy": self.variant.policy, "cache_ttl": self.variant.ttl},
                "storage": self.storage,
            }
        )

    def runtime(self, context_length: int | None = None) -> Any:
        return open_agent_runtime(self.config(context_length), self.home)

    def sync_clock(self, runtime: Runtime) -> None:
        runtime.agent.clock = lambda: WALL_START + self.emulator.clock.now()
        runtime.agent.calls.clock = runtime.agent.clock  # requests are recorded at the emulator's time

    async def turn(self, runtime: Runtime, session_id: str, number: int) -> None:
        if number % 4 == 3:
            todos = [{"id": str(number), "content": f"check item {number}", "status": "pending"}]
            self.emulator.script(
                Reply(tool_calls=[ToolUse("todo", {"todos": todos, "merge": True})]), Reply(text_tokens=180)
            )
        else:
            self.emulator.script(Reply(text_tokens=250))
        session = await runtime.store.sessions.get(session_id)
        assert session is not None
        result = await run_turn(runtime, session, f"Turn {number}: {USER_TEXT}")
        if result.error:
            raise RuntimeError(result.error)
        self.emulator.clock.advance(20)  # a person reading and typing


def spec(chat: int = 0) -> SessionSpec:
    # Per-chat context lives in the volatile layer, as the gateway will put a chat's title there.
    return SessionSpec(
        session_key=f"bench:{chat}",
        source="bench",
        platform="terminal",
        memory_scope=OWNER_SCOPE,
        chat_context=f"Chat {chat}",
        platform_hint=TerminalAdapter.prompt_hint,
    )


async def long_chat(bench: Bench, turns: int) -> None:
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        for number in range(turns):
            await bench.turn(runtime, session.id, number)


async def interleaved(bench: Bench, turns: int) -> None:
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        sessions = [(await runtime.new_session(spec(chat))).record for chat in range(8)]
        for number in range(max(2, turns // 5)):
            for session in sessions:
                await bench.turn(runtime, session.id, number)


async def paused(bench: Bench, turns: int) -> None:
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        for number in range(turns):
            if number and number % 5 == 0:
                bench.emulator.clock.advance(12 * 60)  # a 12-minute pause every 5 turns
            await bench.turn(runtime, session.id, number)


async def restart(bench: Bench, turns: int) -> None:
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        for number in range(turns // 2):
            await bench.turn(runtime, session.id, number)
    async with bench.runtime() as runtime:  # a new process: new store connection, new SDK client
        bench.sync_clock(runtime)
        for number in range(turns // 2, turns):
            await bench.turn(runtime, session.id, number)


async def photo_in_history(bench: Bench, turns: int) -> None:
    """A phone photo in the first turn, then five more turns that keep it in the history: each later
    request sends the image again, byte for byte, and should read it from the cache."""
    from agent.media.images import prepare_image  # Pillow: not in the gateway benchmark's process
    from agent.media.memory import DecodeBudget
    from tests.media_files import photo

    picture = prepare_image(
        photo(4000, 3000), name=None, max_edge=1568, max_megapixels=50, budget=DecodeBudget(256_000_000)
    )
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        bench.emulator.script(Reply(text_tokens=250))
        async with runtime.locks.hold(session.session_key) as lease:
            result = await runtime.agent.run_turn(lease, session, "What is in this photo?", media=[picture])
        if result.error:
            raise RuntimeError(result.error)
        bench.emulator.clock.advance(20)
        for number in range(1, 6):
            await bench.turn(runtime, session.id, number)


COMPRESSION_WINDOW = 24_000  # small, so a long chat crosses the 50% threshold (12,000 tokens) repeatedly


async def compressing(bench: Bench, turns: int) -> None:
    """A chat in a small window: the agent's compressor summarizes the middle whenever it hits 50%."""
    bench.emulator.responder = ChatResponder(reply_tokens=300)
    async with bench.runtime(COMPRESSION_WINDOW) as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        for number in range(max(turns, 45)):
            current = await runtime.store.sessions.get(session.id)
            assert current is not None
            result = await run_turn(runtime, current, f"Turn {number}: FACT-{number} {USER_TEXT}")
            if result.error:
                raise RuntimeError(result.error)
            bench.emulator.clock.advance(20)


SIDE_TASKS = ["Summarise the plan so far.", "List the open risks.", "Draft the next three steps."]
HERMES_CHILD_IDENTITY = (
    "You are a focused subagent working on one delegated task. Complete it with the tools you have and "
    "answer with a concise summary of what you did and found.\n"
)
HERMES_REVIEW_IDENTITY = "You review a conversation and save durable facts about the user to memory.\n"


class SideModel:
    """The emulated model of the side-task scenario: the parent delegates when asked, children answer,
    a review saves one fact. Works on both wires."""

    def __init__(self, hermes: bool) -> None:
        self.hermes = hermes

    def __call__(self, body: dict[str, Any], api: str) -> Reply:
        everything, last = json.dumps(body["messages"]), body["messages"][-1]
        after_tool = last["role"] == "tool" or "tool_result" in json.dumps(last)
        if CHILD_PREAMBLE[:30] in everything:
            return Reply(text_tokens=150)
        if REVIEW_TASK[:30] in everything:
            if after_tool:
                return Reply(text="Saved one preference.")
            fact = {
                "action": "add",
                "target": "user",
                "content": f"Prefers plans in steps ({len(everything)}).",
            }
            return Reply(tool_calls=[ToolUse("memory", fact)])
        if after_tool:
            return Reply(text_tokens=180)
        if "DELEGATE" in json.dumps(last):
            if self.hermes:  # the benchmark runs Hermes-style children itself, after the turn
                return Reply(tool_calls=[ToolUse("todo", {"todos": [], "merge": True})])
            return Reply(tool_calls=[ToolUse("delegate", {"tasks": SIDE_TASKS})])
        return Reply(text_tokens=250)


async def side_tasks(bench: Bench, turns: int, *, hermes: bool = False) -> None:
    """A chat that delegates 3 tasks every 10th turn and is reviewed every 10 turns.

    Herald's side tasks send the session's own prompt bytes (``agent.side``). With ``hermes`` they
    build their own, as Hermes Agent's do: a child gets its own system prompt and a tool list without
    the tools it may not use; the review sends a different system block. Only the side tasks'
    prompts differ between the two rows; the main chat is the same.
    """
    bench.emulator.responder = SideModel(hermes)
    async with bench.runtime() as runtime:
        bench.sync_clock(runtime)
        session = (await runtime.new_session(spec())).record
        for number in range(turns):
            current = await runtime.store.sessions.get(session.id)
            assert current is not None
            delegates = number % 10 == 4
            text = f"Turn {number}: {USER_TEXT}" + (" DELEGATE" if delegates else "")
            result = await run_turn(runtime, current, text)
            if result.error:
                raise RuntimeError(result.error)
            if delegates and hermes:
                await asyncio.gather(*(hermes_child(runtime, current, task) for task in SIDE_TASKS))
            if number % 10 == 9:
                reviewed = await runtime.store.sessions.get(session.id)
                assert reviewed is not None
                if hermes:
                    await hermes_review(runtime, reviewed)
                else:
                    await review(runtime.agent, reviewed, max_iterations=3)
            bench.emulator.clock.advance(20)


async def hermes_child(runtime: Runtime, session: SessionRecord, text: str) -> None:
    """A sub-agent that builds its own prompt: its identity, the project context, its own tools."""
    tools = [tool for tool in session.tools if tool["name"] not in NEVER_IN_CHILDREN | {"delegate"}]
    prompt = session.system_prompt
    own = replace(
        session,
        system_prompt=SystemPrompt(HERMES_CHILD_IDENTITY + prompt.stable, prompt.context, ""),
        tools_json=json.dumps(tools),
    )
    limits = runtime.agent.settings.delegate
    task = SideTask(
        purpose=SUBAGENT,
        task=CHILD_PREAMBLE + text,
        prefix=(),
        allowed_tools=frozenset(tool["name"] for tool in tools),
        max_iterations=limits.max_iterations,
        max_output_tokens=limits.max_output_tokens,
        timeout=limits.timeout,
        depth=1,
    )
    await run_side_task(runtime.agent, own, task)


async def hermes_review(runtime: Runtime, session: SessionRecord) -> None:
    """A review that sends the transcript under a system block of its own."""
    history = await runtime.store.messages.load(session.id)
    own = replace(session, system_prompt=SystemPrompt(HERMES_REVIEW_IDENTITY, "", ""))
    task = SideTask(
        purpose=REVIEW,
        task=REVIEW_TASK,
        prefix=tuple(history),
        allowed_tools=REVIEW_TOOLS,
        max_iterations=3,
        max_output_tokens=runtime.agent.settings.max_tokens,
        timeout=runtime.agent.settings.delegate.timeout,
        depth=1,
    )
    await run_side_task(runtime.agent, own, task)


SCENARIOS: dict[str, Callable[[Bench, int], Awaitable[None]]] = {
    "30-turn chat, tools every 4th": long_chat,
    "8 chats interleaved": interleaved,
    "12-min pauses every 5 turns": paused,
    "restart halfway": restart,
    "45 turns in a 24k window (compresses)": compressing,
    "photo, then 5 turns with it in history": photo_in_history,
    "3 sub-agents every 10th turn + reviews every 10": side_tasks,
    "the same, Hermes-style side prompts": partial(side_tasks, hermes=True),
}
SIDE_SCENARIOS = {"3 sub-agents every 10th turn + reviews every 10", "the same, Hermes-style side prompts"}


def side_requests(result: Result) -> Result:
    """The requests of sub-agents and reviews only (the main chat's left out)."""
    markers = (CHILD_PREAMBLE[:30], REVIEW_TASK[:30])
    side = [r for r in result.requests if any(m in json.dumps(r.json.get("messages", [])) for m in markers)]
    return Result(result.scenario, result.variant, side)


VARIANTS = [
    Variant("anthropic", "claude-sonnet-4-6", "layered", "auto"),
    Variant("anthropic", "claude-sonnet-4-6", "layered", "5m"),
    Variant("anthropic", "claude-sonnet-4-6", "system_and_3", "5m"),
    Variant("openai", "gpt-5", "layered", "auto"),
]


async def run_one(name: str, variant: Variant, turns: int) -> Result:
    return await run_scenario(name, SCENARIOS[name], variant, turns)


async def run_scenario(
    name: str,
    scenario: Callable[[Bench, int], Awaitable[None]],
    variant: Variant,
    turns: int,
    storage: dict[str, Any] | None = None,
) -> Result:
    """``scenario`` against a fresh emulator and HERALD_HOME, with ``AGENTS.md`` in the working directory
    (``storage``: the config's ``storage`` section, by default state.db in that home)."""
    emulator = ProviderEmulator()
    with tempfile.TemporaryDirectory() as tmp:
        home = HeraldHome(Path(tmp) / "home")
        ensure_home(home)
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "AGENTS.md").write_text(PROJECT_NOTES)
        with chdir(work):
            async with emulator.serve() as url:
                await scenario(Bench(emulator, url, home, variant, storage), turns)
    return Result(name, variant, list(emulator.requests))


def after_compressions(result: Result, turns_after: int = 3) -> list[dict[str, Any]]:
    """Hit ratio and efficiency of the ``turns_after`` requests that follow each summary request."""
    ok = [r for r in result.requests if r.ok]
    rows = []
    for number, index in enumerate(i for i, r in enumerate(ok) if is_summary_request(r)):
        window = [r for r in ok[index + 1 :] if not is_summary_request(r)][:turns_after]
        if not window:
            continue  # the run ended right after it
        prompt = sum(r.prompt_tokens for r in window)
        read = sum(r.cache_read for r in window)
        oracle = sum(r.oracle_tokens for r in window)
        summary = ok[index]
        rows.append(
            {
                "variant": result.variant.label,
                "compression": number + 1,
                "summary read": summary.cache_read / summary.prompt_tokens if summary.prompt_tokens else 0.0,
                "hit": read / prompt if prompt else 0.0,
                "efficiency": read / oracle if oracle else 1.0,
            }
        )
    return rows


def format_compression_rows(rows: list[dict[str, Any]]) -> str:
    columns = [
        "variant",
        "compression",
        "summary request hit ratio",
        "next 3 turns hit ratio",
        "next 3 turns efficiency",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['compression']} | {row['summary read']:.3f} | {row['hit']:.3f} "
            f"| {row['efficiency']:.3f} |"
        )
    return "\n".join(lines)


def format_rows(rows: list[dict[str, Any]]) -> str:
    columns = [
        "scenario", "variant", "requests", "prompt tokens", "cache read", "cache write",
        "hit ratio", "efficiency", "input cost vs uncached",
    ]  # fmt: skip
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append(
            f"| {row['scenario']} | {row['variant']} | {row['requests']} | {row['prompt']:,} "
            f"| {row['read']:,} | {row['write']:,} | {row['hit']:.3f} | {row['efficiency']:.3f} "
            f"| {row['cost']:.3f} |"
        )
    return "\n".join(lines)


async def main_async(turns: int, scenarios: list[str]) -> str:
    rows, compression_rows, side_rows = [], [], []
    for name in scenarios:
        for variant in VARIANTS:
            result = await run_one(name, variant, turns)
            rows.append(result.row())
            if SCENARIOS[name] is compressing:
                compression_rows.extend(after_compressions(result))
            if name in SIDE_SCENARIOS:
                side_rows.append(side_requests(result).row())
    report = format_rows(rows)
    if side_rows:
        report += "\n\nSide requests only (sub-agents and reviews):\n\n" + format_rows(side_rows)
    if compression_rows:
        report += "\n\nAfter each compression:\n\n" + format_compression_rows(compression_rows)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=30, help="turns per chat (default 30)")
    parser.add_argument("--quick", action="store_true", help="10 turns per chat")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS), help="run only these")
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")
    os.environ.setdefault("OPENAI_API_KEY", "benchmark")
    print(asyncio.run(main_async(10 if args.quick else args.turns, args.scenario or list(SCENARIOS))))


if __name__ == "__main__":
    main()
