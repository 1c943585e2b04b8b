"""Several bots in one gateway for tests: one fake Telegram per bot (each its own token and username),
the provider emulator, and ``open_gateway`` with ``bots:``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import yaml

from gateway.app import Gateway, open_gateway
from gateway.config import HeraldConfig
from gateway.home import HeraldHome
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest
from tests.fakes import FakeTelegram
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until_awaited
from tests.gateway_support import ADMIN, FRIEND

TOKENS = {"family": "1111:family-token", "work": "2222:work-token"}


@dataclass
class BotsHarness:
    gateway: Gateway
    fakes: Mapping[str, FakeTelegram]
    emulator: ProviderEmulator

    async def settled(self, timeout: float = WAIT_TIMEOUT) -> None:  # noqa: ASYNC109 - a bounded wait
        """Every bot idle: updates confirmed, messages answered, replies sent."""

        async def idle() -> bool:
            for bot in self.gateway.bots:
                services = bot.services
                if (
                    self.fakes[str(bot.name)].pending_updates()
                    or await services.inbox.pending()
                    or services.lanes.depth
                    or await services.outbox.pending_count()
                ):
                    return False
            return True

        await wait_until_awaited(idle, timeout, what="every bot idle")

    def texts(self, bot: str, chat_id: int) -> list[str]:
        return [m.text for m in self.fakes[bot].messages(chat_id) if not m.deleted]


def requests_with(emulator: ProviderEmulator, text: str) -> list[RecordedRequest]:
    """The model requests whose body carries ``text`` (anywhere: system, history, tools)."""
    return [request for request in emulator.requests if text in request.body.decode()]


VARIABLES = {f"{name.upper()}_TELEGRAM_TOKEN": token for name, token in TOKENS.items()}


def bots_config(
    emulator_url: str,
    urls: Mapping[str, str],
    *,
    bots: Mapping[str, Mapping[str, Any]] | None = None,
    http_port: int = 0,
    **sections: Any,
) -> HeraldConfig:
    """Bots ``family`` and ``work`` on the fake Telegrams at ``urls`` (``bots`` adds to their entries);
    both let FRIEND talk and have ADMIN as admin. State on SQLite unless a bot's settings say otherwise."""
    entries: dict[str, Any] = {}
    for name, base_url in urls.items():
        extra = dict((bots or {}).get(name, {}))
        settings = dict(extra.pop("settings", {}))
        settings["telegram"] = {"base_url": base_url, **settings.get("telegram", {})}
        tokens = {"TELEGRAM_BOT_TOKEN": f"${name.upper()}_TELEGRAM_TOKEN"}
        entries[name] = {"tokens": tokens, "settings": settings, **extra}
    gateway = {"admins": [f"telegram:{ADMIN}"], "http_port": http_port, "stream_edit_interval": 0}
    return make_config(
        emulator_url,
        gateway=gateway,
        telegram={"allowed_users": [FRIEND]},
        storage={"url": None},
        bots=entries,
        **sections,
    )


def fake_telegrams() -> dict[str, FakeTelegram]:
    """One fake Telegram per bot, each with the bot's token and username."""
    return {name: FakeTelegram(token, username=f"{name}_bot") for name, token in TOKENS.items()}


@asynccontextmanager
async def two_bots(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    *,
    bots: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
    http_port: int = 0,
    **sections: Any,
) -> AsyncIterator[BotsHarness]:
    """One gateway serving the bots of :func:`bots_config`, each on its own fake Telegram. The config is
    written to ``config.yaml`` too, for the command line (``herald --bot NAME ...``)."""
    fakes = fake_telegrams()
    async with AsyncExitStack() as stack:
        urls = {name: await stack.enter_async_context(fake.serve()) for name, fake in fakes.items()}
        config = bots_config(emulator_url, urls, bots=bots, http_port=http_port, **sections)
        home.config_path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_unset=True)))
        async with open_gateway(config, home, environ={**VARIABLES, **(environ or {})}) as running:
            yield BotsHarness(running, fakes, emulator)
