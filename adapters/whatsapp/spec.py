"""WhatsApp's registration (``adapters.registry``): its settings, secrets, adapter, doctor probe, access
rules and the records its 24-hour window needs. The adapter (aiohttp) is imported only by :func:`build`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, PlatformSpec, Secret, TokenProbe

from .settings import GRAPH_API, PLATFORM, RECORDS, WhatsAppSettings

TOKEN = Secret(
    "WHATSAPP_ACCESS_TOKEN",
    "a system user's permanent token (whatsapp_business_messaging), from Meta Business Suite → System users",
)
APP_SECRET = Secret(
    "WHATSAPP_APP_SECRET", "the Meta app's secret (App settings → Basic): checks webhook signatures"
)
VERIFY_TOKEN = Secret(
    "WHATSAPP_VERIFY_TOKEN", "any long random text; the same in the app's WhatsApp → Configuration → Webhook"
)


def build(context: BuildContext[WhatsAppSettings]) -> Adapter:
    from .adapter import WhatsAppAdapter  # only when WhatsApp is enabled

    secrets, settings = context.secrets, context.settings
    missing = [secret.env for secret in (APP_SECRET, VERIFY_TOKEN) if not secrets.get(secret.env)]
    if missing:
        raise ValueError(
            f"WhatsApp needs {' and '.join(missing)} besides {TOKEN.env}: set it in the environment or "
            "HERALD_HOME/.env"
        )
    if not settings.phone_number_id:
        raise ValueError(
            "WhatsApp needs whatsapp.phone_number_id (the app dashboard, WhatsApp → API Setup): "
            "`herald config set whatsapp.phone_number_id ID`"
        )
    return WhatsAppAdapter(
        secrets[TOKEN.env],
        settings,
        app_secret=secrets[APP_SECRET.env],
        verify_token=secrets[VERIFY_TOKEN.env],
        records=context.records,
        admins=context.admins,
    )


def probe(settings: WhatsAppSettings, secrets: Mapping[str, str]) -> TokenProbe:
    """``GET /{phone-number-id}``: the number's verified name when the token may use it."""
    base = (settings.api_base or GRAPH_API).rstrip("/")
    return TokenProbe(
        f"{base}/{settings.api_version}/{settings.phone_number_id or 'me'}",
        bot_name,
        "create a system user token with whatsapp_business_messaging for this number",
        headers={"Authorization": f"Bearer {secrets[TOKEN.env]}"},
    )


def bot_name(answer: Any) -> str | None:
    if not isinstance(answer, dict):
        return None
    name = answer.get("verified_name") or answer.get("display_phone_number")
    return name if isinstance(name, str) else None


def access(settings: WhatsAppSettings) -> AccessRules:
    """Direct chats only (the Cloud API has no groups): the numbers allowed."""
    return AccessRules(users=frozenset(settings.allowed_numbers))


SPEC = PlatformSpec(
    name=PLATFORM,
    title="WhatsApp",
    settings=WhatsAppSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
    secrets=(APP_SECRET, VERIFY_TOKEN),
    records=RECORDS,
)
