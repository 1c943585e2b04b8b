"""Slack's registration (``adapters.registry``): its settings, tokens, adapter, doctor probe, access
rules and the records Socket Mode catch-up needs. slack_sdk is imported only when :func:`build` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, PlatformSpec, Secret, TokenProbe

from .settings import PLATFORM, RECORDS, SLACK_API, SlackSettings

TOKEN = Secret(
    "SLACK_BOT_TOKEN", "the bot token (xoxb-…), from api.slack.com/apps → your app → OAuth & Permissions"
)
APP_TOKEN = Secret(
    "SLACK_APP_TOKEN",
    "an app-level token (xapp-…, connections:write) for Socket Mode: Basic Information → App-Level Tokens",
)
SIGNING_SECRET = Secret(
    "SLACK_SIGNING_SECRET", "for the Events API over HTTP: Basic Information → App Credentials"
)


def build(context: BuildContext[SlackSettings]) -> Adapter:
    from .adapter import SlackAdapter  # slack_sdk: only when Slack is enabled

    secrets = context.secrets
    app_token, signing_secret = secrets.get(APP_TOKEN.env), secrets.get(SIGNING_SECRET.env)
    if not app_token and not signing_secret:
        raise ValueError(
            f"Slack needs {APP_TOKEN.env} (Socket Mode) or {SIGNING_SECRET.env} (Events API) besides "
            f"{TOKEN.env}: set one in the environment or HERALD_HOME/.env"
        )
    return SlackAdapter(
        secrets[TOKEN.env],
        context.settings,
        app_token=app_token,
        signing_secret=signing_secret,
        records=context.records,
        private_commands=context.private_commands,
    )


def probe(settings: SlackSettings, secrets: Mapping[str, str]) -> TokenProbe:
    """``auth.test``: 200 with ``{"ok": true, "user": ...}`` when the token is good."""
    base = settings.api_base or SLACK_API
    return TokenProbe(
        f"{base.rstrip('/')}/auth.test",
        bot_name,
        "reinstall the app to your workspace and copy the Bot User OAuth Token",
        headers={"Authorization": f"Bearer {secrets[TOKEN.env]}"},
        method="POST",
    )


def bot_name(answer: Any) -> str | None:
    if not isinstance(answer, dict) or answer.get("ok") is not True:
        return None
    name = answer.get("user")
    return name if isinstance(name, str) else None


def access(settings: SlackSettings) -> AccessRules:
    return AccessRules(
        users=frozenset(settings.allowed_users),
        chats=frozenset(settings.allowed_channels),
        servers=frozenset(settings.allowed_teams),
        require_mention=settings.require_mention,
    )


SPEC = PlatformSpec(
    name=PLATFORM,
    title="Slack",
    settings=SlackSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
    secrets=(APP_TOKEN, SIGNING_SECRET),
    records=RECORDS,
)
