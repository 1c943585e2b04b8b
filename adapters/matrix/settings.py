"""Matrix's section of ``config.yaml`` and the names it refers to (no SDK: read at every start)."""

from __future__ import annotations

from pydantic import Field, StrictBool, field_validator

from adapters.records import RecordsPolicy
from adapters.spec import PlatformSettings

PLATFORM = "matrix"  # InboundMessage.platform, the config section, session keys, admins' ids
RECORDS = RecordsPolicy(keep_after_expiry=24 * 3600)  # what the adapter keeps: its sync token (no expiry)


class MatrixSettings(PlatformSettings):
    """The Matrix bot: enabled when MATRIX_ACCESS_TOKEN is set (environment or .env, never here).
    Encrypted rooms are not supported: the bot says so in such a room and leaves it."""

    homeserver: str | None = Field(
        None, description="The homeserver's client-server API URL, e.g. https://matrix.example.org."
    )
    allowed_users: list[str] = Field(
        default_factory=list,
        description="Matrix user ids (@name:server) allowed to use the bot and to invite it to rooms.",
    )
    allowed_rooms: list[str] = Field(
        default_factory=list,
        description="Room ids (!id:server) where everyone may use the bot; an invite to one is accepted.",
    )
    require_mention: StrictBool = Field(
        True, description="In rooms, answer only when mentioned, replied to, or sent a command."
    )

    @field_validator("allowed_users", "allowed_rooms", mode="before")
    @classmethod
    def _as_text(cls, value: object) -> object:
        return [str(item) for item in value] if isinstance(value, list) else value

    @field_validator("homeserver")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("the homeserver is an http:// or https:// URL, e.g. https://matrix.example.org")
        return value.rstrip("/") if value else value
