"""Discord's registration (``adapters.registry``): its settings, token, adapter, doctor probe, access
rules and the records its slash commands need. discord.py is imported only when :func:`build` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, PlatformSpec, Secret, TokenProbe

from .interaction_records import RECORDS
from .settings import DISCORD_API, PLATFORM, DiscordSettings

TOKEN = Secret(
    "DISCORD_BOT_TOKEN", "the bot's token, from the Discord developer portal (your application → Bot)"
)


def build(context: BuildContext[DiscordSettings]) -> Adapter:
    from .adapter import DiscordAdapter  # discord.py: only when Discord is enabled

    settings = context.settings
    return DiscordAdapter(
        context.secrets[TOKEN.env],
        api_base=settings.api_base,
        gateway_url=settings.gateway_url,
        free_response_channels=settings.free_response_channels,
        ephemeral_commands=context.private_commands,
        records=context.records,
        shard_count=settings.shard_count,
    )


def probe(settings: DiscordSettings, secrets: Mapping[str, str]) -> TokenProbe:
    """``GET /users/@me``: the bot's own user when the token is good."""
    base = (settings.api_base or DISCORD_API).rstrip("/")
    return TokenProbe(
        f"{base}/users/@me",
        bot_name,
        "reset the token under Bot in the Discord developer portal",
        headers={"Authorization": f"Bot {secrets[TOKEN.env]}"},
    )


def bot_name(answer: Any) -> str | None:
    name = answer.get("username") if isinstance(answer, dict) else None
    return name if isinstance(name, str) else None


def access(settings: DiscordSettings) -> AccessRules:
    return AccessRules(
        users=frozenset(settings.allowed_users),
        chats=frozenset(settings.allowed_channels),
        servers=frozenset(settings.allowed_guilds),
        require_mention=settings.require_mention,
    )


SPEC = PlatformSpec(
    name=PLATFORM,
    title="Discord",
    settings=DiscordSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
    records=RECORDS,
)
