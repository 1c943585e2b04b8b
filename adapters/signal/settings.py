"""Signal's section of ``config.yaml`` and the names it refers to (no client library: read at every start)."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator

from adapters.spec import PlatformSettings, ids_as_text

PLATFORM = "signal"  # InboundMessage.platform, the config section, session keys, admins' ids
DAEMON_URL = "http://127.0.0.1:8080"  # signal-cli's own default for ``daemon --http``
MESSAGE_LIMIT = 2000  # UTF-16 units: past this signal-cli sends the text as a long-text attachment
ABOUT_LIMIT = 140  # characters of a Signal profile's "about" text


class SignalSettings(PlatformSettings):
    """The Signal account: enabled when SIGNAL_ACCOUNT (the linked or registered number, +15551234567)
    is set (environment or .env). Herald talks to signal-cli's daemon, started as
    ``signal-cli -a +NUMBER daemon --http=127.0.0.1:8080 --receive-mode=on-connection``."""

    daemon_url: str = Field(
        DAEMON_URL,
        description="Where signal-cli's daemon serves HTTP (its --http address). Keep it on 127.0.0.1: "
        "the daemon has no authentication.",
    )
    allowed_users: list[str] = Field(
        default_factory=list,
        description="Phone numbers (+15551234567) or, for people whose number Signal hides, account UUIDs "
        "allowed to use the bot (besides admins and pairings).",
    )
    allowed_groups: list[str] = Field(
        default_factory=list,
        description="Groups where everyone may use the bot, as 'group:' plus signal-cli's group id "
        "(signal-cli listGroups).",
    )
    require_mention: StrictBool = Field(
        True, description="In groups, answer only when mentioned, replied to, or sent a command."
    )
    publish_commands: StrictBool = Field(
        True,
        description="Write the command list into the account's profile 'about' text (what people see on "
        "its profile). Turn off when the number is your own phone's.",
    )
    stream_timeout: StrictFloat | StrictInt = Field(
        45,
        gt=0,
        le=600,
        description="Seconds the event stream may stay silent (signal-cli sends a keep-alive every 15) "
        "before it is replaced; messages that arrived meanwhile come on the new stream.",
    )

    @field_validator("allowed_users", "allowed_groups", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return ids_as_text(value)

    @field_validator("daemon_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("the daemon URL is http://HOST:PORT, as given to signal-cli daemon --http")
        return value.rstrip("/")
