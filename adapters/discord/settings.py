"""Discord's section of ``config.yaml`` and the names it refers to (no SDK: read at every start)."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictInt, field_validator

from adapters.spec import PlatformSettings, ids_as_text

PLATFORM = "discord"  # InboundMessage.platform, the config section, session keys, admins' ids
DISCORD_API = "https://discord.com/api/v10"  # the REST API discord.py talks to by default


class DiscordSettings(PlatformSettings):
    """The Discord bot: enabled when DISCORD_BOT_TOKEN is set (environment or .env, never here)."""

    allowed_users: list[str] = Field(
        default_factory=list,
        description="Discord user ids allowed to use the bot (besides admins and pairings).",
    )
    allowed_guilds: list[str] = Field(
        default_factory=list, description="Server (guild) ids whose members may all use the bot there."
    )
    allowed_channels: list[str] = Field(
        default_factory=list, description="Channel ids where everyone may use the bot."
    )
    require_mention: StrictBool = Field(
        True,
        description="In servers, answer only when mentioned or replied to (or in a free-response channel).",
    )
    free_response_channels: list[str] = Field(
        default_factory=list, description="Channel ids where the bot answers every message, mention or not."
    )
    api_base: str | None = Field(
        None, description="REST API base URL; null = Discord's own (tests point it at a fake server)."
    )
    gateway_url: str | None = Field(
        None, description="Websocket gateway URL; null = Discord's own (tests point it at a fake server)."
    )
    shard_count: StrictInt | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Gateway shards (Discord requires them past 2,500 servers); null = Discord's "
        "recommendation. In a cluster each shard is a lease, spread over the processes.",
    )

    @field_validator(
        "allowed_users", "allowed_guilds", "allowed_channels", "free_response_channels", mode="before"
    )
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return ids_as_text(value)
