"""WhatsApp's section of ``config.yaml`` and the names it refers to (read at every start)."""

from __future__ import annotations

from pydantic import Field, field_validator

from adapters.records import RecordsPolicy
from adapters.spec import PlatformSettings, ids_as_text

PLATFORM = "whatsapp"  # InboundMessage.platform, the config section, session keys, admins' ids
GRAPH_API = "https://graph.facebook.com"  # the Cloud API's host: {GRAPH_API}/{version}/{phone-number-id}/...
WEBHOOK_PATH = "/whatsapp/webhook"  # where the gateway's HTTP server receives Meta's GETs and POSTs
RECORDS = RecordsPolicy(keep_after_expiry=3600)  # when each person last wrote (the 24-hour window)


class WhatsAppSettings(PlatformSettings):
    """A WhatsApp Business number on Meta's Cloud API: enabled when WHATSAPP_ACCESS_TOKEN is set
    (environment or .env, never here), with WHATSAPP_APP_SECRET (checks each webhook's signature) and
    WHATSAPP_VERIFY_TOKEN (answers Meta's verification of the callback URL). The callback URL is the
    gateway's HTTP server at /whatsapp/webhook, reachable over HTTPS from Meta."""

    phone_number_id: str | None = Field(
        None,
        description="The business number's id (WhatsApp → API Setup in the app dashboard; not the "
        "phone number itself). Required.",
    )
    allowed_numbers: list[str] = Field(
        default_factory=list,
        description="WhatsApp ids (the number with its country code, digits only: 4915112345678) allowed "
        "to use the bot (besides admins and pairings).",
    )
    template: str | None = Field(
        None,
        description="An approved message template sent instead of a reply when the person last wrote over "
        "24 hours ago (WhatsApp allows nothing else then); null = such a reply is not sent (the owner is "
        "told in the log).",
    )
    template_language: str = Field("en_US", description="The template's language code.")
    api_version: str = Field("v23.0", pattern=r"^v\d+\.\d+$", description="The Graph API version to call.")
    api_base: str | None = Field(
        None, description="Graph API base URL; null = Meta's own (tests point it at a fake server)."
    )

    @field_validator("allowed_numbers", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return ids_as_text(value)

    @field_validator("allowed_numbers")
    @classmethod
    def _digits(cls, value: list[str]) -> list[str]:
        cleaned = [number.strip().removeprefix("+").replace(" ", "") for number in value]
        bad = [number for number in cleaned if not number.isdigit()]
        if bad:
            raise ValueError(f"a WhatsApp id is the number in digits with its country code, not {bad[0]!r}")
        return cleaned
