"""Telegram's registration (``adapters.registry``): its settings, token, adapter, doctor probe and
access rules. python-telegram-bot is imported only when :func:`build` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, PlatformSpec, Secret, TokenProbe

from .settings import PLATFORM, TELEGRAM_API, TelegramSettings

TOKEN = Secret("TELEGRAM_BOT_TOKEN", "the bot's token, from @BotFather (/newbot)")


def build(context: BuildContext[TelegramSettings]) -> Adapter:
    from .adapter import TelegramAdapter  # python-telegram-bot: only when Telegram is enabled

    settings = context.settings
    return TelegramAdapter(
        context.secrets[TOKEN.env],
        base_url=settings.base_url,
        mode=settings.mode,
        webhook_url=settings.webhook_url,
        poll_timeout=settings.long_poll,
    )


def probe(settings: TelegramSettings, secrets: Mapping[str, str]) -> TokenProbe:
    """``getMe``: the bot's own user when the token is good."""
    base = settings.base_url or TELEGRAM_API
    return TokenProbe(f"{base}{secrets[TOKEN.env]}/getMe", bot_name, "ask @BotFather for the token")


def bot_name(answer: Any) -> str | None:
    result = answer.get("result") if isinstance(answer, dict) else None
    name = result.get("username") if isinstance(result, dict) else None
    return name if isinstance(name, str) else None


def access(settings: TelegramSettings) -> AccessRules:
    return AccessRules(users=frozenset(settings.allowed_users), require_mention=settings.require_mention)


SPEC = PlatformSpec(
    name=PLATFORM,
    title="Telegram",
    settings=TelegramSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
)
