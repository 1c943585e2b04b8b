"""Telegram's section of ``config.yaml`` and the names it refers to (no SDK: read at every start)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from adapters.spec import PlatformSettings, ids_as_text

PLATFORM = "telegram"  # InboundMessage.platform, the config section, session keys, admins' ids
TELEGRAM_API = "https://api.telegram.org/bot"  # the Bot API: {TELEGRAM_API}{token}/{method}
WEBHOOK_PATH = "/telegram/webhook"  # where the gateway's HTTP server receives Telegram's POSTs


class TelegramSettings(PlatformSettings):
    """The Telegram bot: enabled when TELEGRAM_BOT_TOKEN is set (environment or .env, never here).
    Telegram lets bots download files of at most 20 MB."""

    mode: Literal["polling", "webhook"] = Field(
        "polling", description="polling (long polling, works anywhere) or webhook (needs webhook_url)."
    )
    webhook_url: str | None = Field(
        None,
        description=f"Public HTTPS URL that reaches the gateway's server at {WEBHOOK_PATH} (webhook mode).",
    )
    base_url: str | None = Field(
        None, description="Bot API base URL; null = Telegram's own (tests point it at a fake server)."
    )
    long_poll: int = Field(
        30,
        ge=1,
        le=50,
        description="Polling mode: seconds one getUpdates waits for news. A connection that died "
        "silently is noticed this long plus 10 s after its last answer; shorter costs a request that "
        "often when the bot is idle.",
    )
    allowed_users: list[str] = Field(
        default_factory=list,
        description="Telegram user ids allowed to use the bot (besides admins and pairings).",
    )
    require_mention: StrictBool = Field(
        True, description="In groups, answer only when mentioned, replied to or commanded."
    )

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return ids_as_text(value)

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramSettings:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError(
                "mode is webhook but webhook_url is not set (the public URL Telegram should call)"
            )
        return self
