"""A whole gateway for tests: the provider emulator, the fake Telegram Bot API, and ``open_gateway``.

Everything runs through the real python-telegram-bot and the real anthropic SDK on loopback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from gateway.app import Gateway, open_gateway
from gateway.home import HeraldHome
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.fakes import FakeTelegram
from tests.fakes.telegram import SentMessage
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until_awaited

ADMIN = 1
FRIEND = 2
STRANGER = 3


@dataclass
class Harness:
    gateway: Gateway
    fake: FakeTelegram
    emulator: ProviderEmulator

    async def settled(self, timeout: float = WAIT_TIMEOUT) -> None:  # noqa: ASYNC109 - a bounded wait
        """Wait until every update is confirmed, every message answered and every reply sent (checked in
        the order work flows, so nothing slips between two checks)."""
        services = self.gateway.services

        async def idle() -> bool:
            return (
                not self.fake.pending_updates()
                and not await services.inbox.pending()
                and services.lanes.depth == 0
                and await services.outbox.pending_count() == 0
            )

        await wait_until_awaited(idle, timeout, what="the gateway idle", describe=self.fake.describe)

    def texts(self, chat_id: int, thread_id: int | None = None) -> list[str]:
        """What the bot's visible (not deleted) messages in a chat say now."""
        return [m.text for m in self.fake.messages(chat_id, thread_id) if not m.deleted]

    def visible(self, chat_id: int, thread_id: int | None = None) -> list[SentMessage]:
        return [m for m in self.fake.messages(chat_id, thread_id) if not m.deleted]


def gateway_config(url: str, base_url: str, provider: str = "anthropic", **sections: Any) -> Any:
    gateway = {"admins": [f"telegram:{ADMIN}"], "http_port": 0, "stream_edit_interval": 0.05}
    gateway.update(sections.pop("gateway", {}))
    telegram = {"base_url": base_url, "allowed_users": [FRIEND]}
    telegram.update(sections.pop("telegram", {}))
    return make_config(url, provider, gateway=gateway, telegram=telegram, **sections)


@asynccontextmanager
async def telegram_gateway(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    *,
    fake: FakeTelegram | None = None,
    provider: str = "anthropic",
    environ: Mapping[str, str] | None = None,
    **sections: Any,
) -> AsyncIterator[Harness]:
    """A running gateway; pass ``fake`` to keep one fake Telegram (its chats, its messages) across
    restarts, or to prepare it before the gateway starts; ``environ``: more variables it reads (besides
    the bot token)."""
    fake = fake or FakeTelegram()
    async with fake.serve() as base_url:
        config = gateway_config(emulator_url, base_url, provider, **sections)
        variables = {"TELEGRAM_BOT_TOKEN": fake.token, **(environ or {})}
        async with open_gateway(config, home, environ=variables) as gateway:
            yield Harness(gateway, fake, emulator)
