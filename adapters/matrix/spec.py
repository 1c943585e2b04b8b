"""Matrix's registration (``adapters.registry``): its settings, token, adapter, doctor probe, access
rules and the record that keeps its sync token. mautrix is imported only when :func:`build` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, PlatformSpec, Secret, TokenProbe

from .settings import PLATFORM, RECORDS, MatrixSettings

TOKEN = Secret(
    "MATRIX_ACCESS_TOKEN",
    "the bot account's access token (Element: Settings → Help & About → Advanced → Access Token, or /login)",
)
NO_HOMESERVER = (
    "Matrix needs its homeserver URL: set matrix.homeserver in config.yaml (https://matrix.example.org)."
)


def build(context: BuildContext[MatrixSettings]) -> Adapter:
    from .adapter import MatrixAdapter  # mautrix: only when Matrix is enabled

    settings = context.settings
    if settings.homeserver is None:
        raise ValueError(NO_HOMESERVER)
    return MatrixAdapter(
        settings.homeserver,
        context.secrets[TOKEN.env],
        invite_from=frozenset(settings.allowed_users) | context.admins,
        invite_to=frozenset(settings.allowed_rooms),
        records=context.records,
    )


def probe(settings: MatrixSettings, secrets: Mapping[str, str]) -> TokenProbe:
    """``GET /account/whoami``: the bot's user id when the token is good."""
    base = settings.homeserver or "https://matrix.invalid"
    return TokenProbe(
        f"{base}/_matrix/client/v3/account/whoami",
        bot_name,
        "log in as the bot again and put the new access token in MATRIX_ACCESS_TOKEN",
        headers={"Authorization": f"Bearer {secrets[TOKEN.env]}"},
    )


def bot_name(answer: Any) -> str | None:
    name = answer.get("user_id") if isinstance(answer, dict) else None
    return name if isinstance(name, str) else None


def access(settings: MatrixSettings) -> AccessRules:
    return AccessRules(
        users=frozenset(settings.allowed_users),
        chats=frozenset(settings.allowed_rooms),
        require_mention=settings.require_mention,
    )


SPEC = PlatformSpec(
    name=PLATFORM,
    title="Matrix",
    settings=MatrixSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
    records=RECORDS,
)
