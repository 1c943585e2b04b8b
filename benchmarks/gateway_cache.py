"""The gateway benchmark's cache measurement: scripted conversations through the whole gateway
(``python -m benchmarks.gateway --only cache``); efficiency as in ``benchmarks/cache.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

from adapters.telegram.settings import TelegramSettings
from agent.prompt import SystemPrompt
from benchmarks.cache import USER_TEXT, VARIANTS, Bench, Result, format_rows, run_scenario
from benchmarks.gateway_harness import SETTLE_TIMEOUT, UnpacedTelegramAdapter, table, total
from gateway.app import Gateway, open_gateway
from gateway.config import GatewaySettings
from tests.emulator import RecordedRequest, Reply, ToolUse
from tests.emulator.blocks import anthropic_layout
from tests.fakes import FakeTelegram
from tests.gateway_support import Harness

# --- cache -----------------------------------------------------------------------------------------

DM_USERS = [201, 202, 203, 204, 205, 206, 207, 208]
GROUP = -1001
SPEAKERS = [(301, "Ada"), (302, "Bob"), (303, "Cy")]


@dataclass
class Notes:
    """What a scenario saw besides the emulator's log: each DM session's prompt, by chat."""

    prompts: dict[int, SystemPrompt] = field(default_factory=dict)


class GatewayBench:
    """A gateway on the bench's home and emulator, Telegram faked on this loop; one turn = one message
    answered and delivered, then 20 s on the emulated clock."""

    def __init__(self, bench: Bench, fake: FakeTelegram, gateway: Gateway) -> None:
        self.bench, self.fake, self.gateway = bench, fake, gateway
        self.harness = Harness(gateway, fake, bench.emulator)

    async def turn(self, chat: int, number: int, speaker: tuple[int, str] | None = None) -> None:
        emulator = self.bench.emulator
        if number % 4 == 3:  # a tool call every 4th turn, as in benchmarks/cache.py
            todos = [{"id": str(number), "content": f"check item {number}", "status": "pending"}]
            emulator.script(
                Reply(tool_calls=[ToolUse("todo", {"todos": todos, "merge": True})]), Reply(text_tokens=180)
            )
        else:
            emulator.script(Reply(text_tokens=250))
        text = f"Chat {chat}, turn {number}: {USER_TEXT}"  # people write different things
        if speaker is None:
            self.fake.private_message(chat, text, first_name=f"User {chat}")
        else:
            user, name = speaker
            self.fake.group_message(chat, user, text, mention_bot=True, first_name=name, title="Ops")
        await self.harness.settled(SETTLE_TIMEOUT)
        if total(self.gateway.services.metrics.turns, outcome="failed"):
            raise RuntimeError(f"a turn failed:\n{self.fake.describe()}")
        emulator.clock.advance(20)  # a person reading and typing

    async def prompt(self, chat: int) -> SystemPrompt:
        session = await self.gateway.services.runtime.store.sessions.latest(f"telegram:dm:{chat}")
        assert session is not None
        return session.system_prompt


@asynccontextmanager
async def faked_telegram() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    async with fake.serve():
        yield fake


@asynccontextmanager
async def bench_gateway(bench: Bench, fake: FakeTelegram) -> AsyncIterator[GatewayBench]:
    """The bench's model, caching and context settings (``Bench.config``) plus a Telegram gateway."""
    users = [*DM_USERS, *(user for user, _ in SPEAKERS)]
    config = bench.config().model_copy(
        update={
            "gateway": GatewaySettings(http_port=0),
            "telegram": TelegramSettings(base_url=fake.base_url, allowed_users=[str(u) for u in users]),
        }
    )
    adapter = UnpacedTelegramAdapter(fake.token, base_url=fake.base_url)
    async with open_gateway(config, bench.home, adapters=lambda _storage: [adapter]) as gateway:
        bench.sync_clock(gateway.services.runtime)
        yield GatewayBench(bench, fake, gateway)


async def dm_chat(bench: Bench, turns: int) -> None:
    async with faked_telegram() as fake, bench_gateway(bench, fake) as chat:
        for number in range(turns):
            await chat.turn(DM_USERS[0], number)


async def interleaved(bench: Bench, turns: int, notes: Notes) -> None:
    async with faked_telegram() as fake, bench_gateway(bench, fake) as chats:
        for number in range(max(2, turns // 5)):
            for user in DM_USERS:
                await chats.turn(user, number)
        notes.prompts = {user: await chats.prompt(user) for user in DM_USERS}


async def group(bench: Bench, turns: int) -> None:
    async with faked_telegram() as fake, bench_gateway(bench, fake) as chat:
        for number in range(turns):
            await chat.turn(GROUP, number, speaker=SPEAKERS[number % len(SPEAKERS)])


async def restart(bench: Bench, turns: int) -> None:
    async with faked_telegram() as fake:
        async with bench_gateway(bench, fake) as chat:
            for number in range(turns // 2):
                await chat.turn(DM_USERS[0], number)
        async with bench_gateway(bench, fake) as chat:  # a new process on the same home
            for number in range(turns // 2, turns):
                await chat.turn(DM_USERS[0], number)


def shared_prefix_tokens(request: RecordedRequest, prompt: SystemPrompt) -> int:
    """Tokens of tools + the stable and context layers: the prefix every chat's prompt shares."""
    shared_layers = sum(1 for name, _ in prompt.layers() if name != "volatile")
    positions = anthropic_layout(request.json).positions
    return positions[len(request.json.get("tools") or []) + shared_layers - 1].cum_tokens


def first_requests(result: Result, notes: Notes) -> list[list[str]]:
    """The first request of each chat (only the user's message in ``messages``), in chat order."""
    firsts = [r for r in result.requests if r.ok and len(r.json["messages"]) == 1]
    rows = []
    for number, (user, request) in enumerate(zip(DM_USERS, firsts, strict=True), start=1):
        shared = shared_prefix_tokens(request, notes.prompts[user])
        verdict = "yes" if request.cache_read >= shared else ("first chat" if number == 1 else "NO")
        rows.append(
            [str(number), f"{request.prompt_tokens:,}", f"{shared:,}", f"{request.cache_read:,}",
             f"{request.oracle_tokens:,}", verdict]
        )  # fmt: skip
    return rows


FIRST_COLUMNS = [
    "chat",
    "prompt tokens",
    "tools + stable + context",
    "cache read",
    "oracle",
    "reads the shared prefix",
]


def shortfalls(result: Result) -> list[str]:
    """Requests that read less than the oracle allowed: where efficiency was lost."""
    lines = []
    for index, request in enumerate(r for r in result.requests if r.ok):
        if request.cache_read < request.oracle_tokens:
            lines.append(
                f"  {result.scenario}: request {index + 1} ({len(request.json['messages'])} messages): "
                f"read {request.cache_read:,} of {request.oracle_tokens:,} the oracle allows"
            )
    return lines


async def cache(turns: int) -> tuple[str, str, list[str]]:
    variant = VARIANTS[0]  # the defaults: anthropic claude-sonnet-4-6, layered breakpoints, ttl auto
    notes = Notes()
    scenarios: list[tuple[str, Callable[[Bench, int], Awaitable[None]]]] = [
        (f"{turns}-turn DM chat", dm_chat),
        ("8 DM chats interleaved", partial(interleaved, notes=notes)),
        ("group chat, 3 speakers", group),
        ("DM chat, gateway restarted halfway", restart),
    ]
    results = [await run_scenario(name, scenario, variant, turns) for name, scenario in scenarios]
    main = format_rows([result.row() for result in results])
    firsts = table(FIRST_COLUMNS, first_requests(results[1], notes))
    return main, firsts, [line for result in results for line in shortfalls(result)]
