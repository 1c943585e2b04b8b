"""Matrix, Discord, Slack, WhatsApp and Signal through the whole gateway: the latency and throughput
measurements of ``benchmarks/gateway.py`` by the same method, each platform's fake in a process of its
own (``benchmarks/fake_matrix.py``, ``fake_discord.py``, ``fake_slack.py``, ``fake_whatsapp.py``,
``fake_signal.py``) in place of the fake Telegram, and the stock adapter built from the platform's spec,
as ``herald gateway run`` builds it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from tempfile import TemporaryDirectory

from benchmarks.concurrency import QUESTION, emulator_process
from benchmarks.fake_discord import FakeDiscordProcess
from benchmarks.fake_matrix import FakeMatrixProcess
from benchmarks.fake_signal import FakeSignalProcess
from benchmarks.fake_slack import FakeSlackProcess
from benchmarks.fake_telegram import Check, Sent
from benchmarks.fake_whatsapp import FakeWhatsAppProcess
from benchmarks.gateway_harness import STORAGE_URL, fresh_home, ms, operations_sent, percentile, poll, settle
from benchmarks.platform_process import PlatformProcess
from gateway.app import open_gateway
from gateway.config import HeraldConfig

PLATFORMS: dict[str, Callable[[], PlatformProcess]] = {
    "Matrix": FakeMatrixProcess,
    "Discord": FakeDiscordProcess,
    "Slack": FakeSlackProcess,
    "WhatsApp": FakeWhatsAppProcess,
    "Signal": FakeSignalProcess,
}
LATENCY_CHATS = [101, 102, 103, 104]
LATENCY_SPACING = 0.1
LATENCY_COLUMNS = [
    "platform", "gateway.stream_edit_interval", "messages", "answered once", "first send p50",
    "first send p99", "answer complete p50", "answer complete p99",
]  # fmt: skip
THROUGHPUT_COLUMNS = [
    "platform", "stream interval", "messages", "answered once", "wall", "answers/s", "answer complete p50",
    "answer complete p99",
]  # fmt: skip


def config_for(
    name: str, emulator_url: str, fake: PlatformProcess, chats: list[int], *, interval: float
) -> HeraldConfig:
    return HeraldConfig.model_validate(
        {
            "storage": {"url": STORAGE_URL.get()},
            "model": {"base_url": emulator_url},
            "gateway": {"http_port": 0, "stream_edit_interval": interval, **fake.gateway_section()},
            name.lower(): fake.section(chats),
        }
    )


async def latency(name: str, messages: int, interval: float) -> list[str]:
    """``messages`` direct messages one at a time over a few chats, through the stock gateway."""
    chats = LATENCY_CHATS
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, PLATFORMS[name]() as fake:
        config = config_for(name, url, fake, chats, interval=interval)
        async with open_gateway(config, fresh_home(tmp), environ=fake.environ()) as gateway:
            sent: list[Sent] = []
            for n in range(len(chats) + messages):  # each chat's first message is a warm-up
                chat = chats[n % len(chats)]
                started = time.monotonic()
                done = operations_sent(gateway) + 1
                [message] = await fake.inject([(chat, f"c{chat}m{n}", QUESTION)])
                await poll(lambda: operations_sent(gateway) >= done)  # noqa: B023 - awaited here
                if n >= len(chats):
                    sent.append(message)
                await asyncio.sleep(max(0.0, started + LATENCY_SPACING - time.monotonic()))
            await settle(gateway, len(chats) + messages)
            answers, _ = await fake.answers(chats)
    check = Check.of(sent, answers)
    first = [check.first[m] - m.at for m in check.first]
    final = [check.final[m] - m.at for m in check.final]
    mode = f"{interval:g} s (streams)" if interval else "0 (one message at the end)"
    return [
        name, mode, str(len(sent)), check.line(), ms(percentile(first, 50)), ms(percentile(first, 99)),
        ms(percentile(final, 50)), ms(percentile(final, 99)),
    ]  # fmt: skip


async def throughput(name: str, chats: int, per_chat: int, *, interval: float) -> list[str]:
    """``chats`` × ``per_chat`` messages injected at once (round-robin over chats), stock adapter."""
    users = [1000 + n for n in range(chats)]
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, PLATFORMS[name]() as fake:
        config = config_for(name, url, fake, users, interval=interval)
        async with open_gateway(config, fresh_home(tmp), environ=fake.environ()) as gateway:
            sent = await fake.inject([(u, f"c{u}m{n}", QUESTION) for n in range(per_chat) for u in users])
            await settle(gateway, len(sent))
            answers, _ = await fake.answers(users)
    check = Check.of(sent, answers)
    wall = max(check.final.values()) - min(m.at for m in sent)
    complete = [check.final[m] - m.at for m in check.final]
    return [
        name, f"{interval:g} s", str(len(sent)), check.line(), f"{wall:.2f} s", f"{check.once / wall:.1f}",
        ms(percentile(complete, 50)), ms(percentile(complete, 99)),
    ]  # fmt: skip
