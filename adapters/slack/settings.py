"""Slack's section of ``config.yaml`` and the names it refers to (no SDK: read at every start)."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator

from adapters.records import RecordsPolicy
from adapters.spec import PlatformSettings, ids_as_text

PLATFORM = "slack"  # InboundMessage.platform, the config section, session keys, admins' ids
SLACK_API = "https://slack.com/api/"  # the Web API slack_sdk talks to by default
WEBHOOK_PATH = "/slack/events"  # where the gateway's HTTP server receives Events API and command POSTs
HARD_LIMIT = 40_000  # characters: Slack truncates a message's text past this
RECORDS = RecordsPolicy(keep_after_expiry=24 * 3600)  # catch-up cursors, threads, slash commands


class SlackSettings(PlatformSettings):
    """The Slack app: enabled when SLACK_BOT_TOKEN (xoxb-…) is set (environment or .env, never here).
    SLACK_APP_TOKEN (xapp-…) turns on Socket Mode; SLACK_SIGNING_SECRET turns on the Events API at
    /slack/events on the gateway's HTTP server. One of them is needed."""

    allowed_users: list[str] = Field(
        default_factory=list,
        description="Slack member ids (U…) allowed to use the bot (besides admins and pairings).",
    )
    allowed_channels: list[str] = Field(
        default_factory=list, description="Channel ids (C…) where everyone may use the bot."
    )
    allowed_teams: list[str] = Field(
        default_factory=list, description="Workspace (team) ids (T…) whose members may all use the bot."
    )
    require_mention: StrictBool = Field(
        True, description="In channels, answer only when mentioned (or commanded); DMs are always answered."
    )
    slash_command: str = Field(
        "/herald",
        pattern=r"^/[a-z0-9_-]{1,31}$",
        description="The slash command you created for the app: '/herald new' runs Herald's /new.",
    )
    message_limit: StrictInt = Field(
        4_000,
        ge=100,
        le=HARD_LIMIT,
        description="Characters per message before an answer is split. Slack folds longer ones behind "
        "'Show more' and truncates at 40,000.",
    )
    thread_context: StrictInt = Field(
        30,
        ge=0,
        le=200,
        description="Earlier messages of a thread given to the model (with the message) when the bot is "
        "mentioned there for the first time; 0 = none.",
    )
    ping_interval: StrictFloat | StrictInt = Field(
        5,
        gt=0,
        le=60,
        description="Seconds between Socket Mode pings: a connection silent for four of them is replaced "
        "and what it missed is caught up.",
    )
    api_base: str | None = Field(
        None, description="Web API base URL; null = Slack's own (tests point it at a fake server)."
    )

    @field_validator("allowed_users", "allowed_channels", "allowed_teams", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return ids_as_text(value)
