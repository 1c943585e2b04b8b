"""Signal's registration (``adapters.registry``): its settings, the account variable, the adapter, the
doctor's check of the daemon and the access rules. aiohttp is imported only when :func:`build` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, PlatformSpec, Secret, TokenProbe

from .settings import PLATFORM, SignalSettings

TOKEN = Secret(
    "SIGNAL_ACCOUNT",
    "the Signal number signal-cli serves (+15551234567): `signal-cli link -n herald` or register it",
)


def build(context: BuildContext[SignalSettings]) -> Adapter:
    from .adapter import SignalAdapter

    account = context.secrets[TOKEN.env]
    if not account.startswith("+") or not account[1:].isdigit():
        raise ValueError(f"{TOKEN.env} is a phone number with its country code, like +15551234567")
    return SignalAdapter(account, context.settings)


def probe(settings: SignalSettings, secrets: Mapping[str, str]) -> TokenProbe:
    """``GET /api/v1/check``: 200 (no body) while signal-cli's daemon runs."""
    account = secrets[TOKEN.env]

    def bot_name(_answer: Any) -> str | None:
        return account

    return TokenProbe(
        f"{settings.daemon_url}/api/v1/check",
        bot_name,
        f"start signal-cli -a {account} daemon --http=<signal.daemon_url's host:port>",
    )


def access(settings: SignalSettings) -> AccessRules:
    return AccessRules(
        users=frozenset(settings.allowed_users),
        chats=frozenset(settings.allowed_groups),
        require_mention=settings.require_mention,
    )


SPEC = PlatformSpec(
    name=PLATFORM,
    title="Signal",
    settings=SignalSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
)
