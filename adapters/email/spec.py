"""Email's registration (``adapters.registry``): its settings, password, adapter, doctor check, access
rules and the records that keep each thread's subject and Message-IDs. aioimaplib and aiosmtplib are
imported only when :func:`build` (or the doctor's check) runs."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.base import Adapter
from adapters.spec import AccessRules, BuildContext, LoginProbe, PlatformSpec, ProbeRefused, Secret

from .settings import PLATFORM, RECORDS, EmailSettings, address_of

TOKEN = Secret(
    "EMAIL_PASSWORD",
    "the bot mailbox's password for IMAP and SMTP (Gmail, Fastmail, iCloud: an app password)",
)


def missing(settings: EmailSettings) -> list[str]:
    """The settings email needs that are not set."""
    needed = {"email.address": settings.address, "email.imap_host": settings.imap_host}
    needed["email.smtp_host"] = settings.smtp_host
    return [key for key, value in needed.items() if not value]


def build(context: BuildContext[EmailSettings]) -> Adapter:
    from .adapter import EmailAdapter, Server  # aioimaplib, aiosmtplib: only when email is enabled

    settings = context.settings
    if absent := missing(settings):
        raise ValueError(f"email needs {', '.join(absent)} in config.yaml (see docs/email.md)")
    assert settings.address and settings.imap_host and settings.smtp_host
    return EmailAdapter(
        address=settings.address,
        name=settings.name,
        username=settings.username,
        password=context.secrets[TOKEN.env],
        imap=Server(settings.imap_host, settings.imap_port, settings.imap_security),
        smtp=Server(settings.smtp_host, settings.smtp_port, settings.smtp_security),
        allowed=frozenset(settings.allowed_senders) | {address_of(a) for a in context.admins},
        mailbox=settings.mailbox,
        idle=settings.idle,
        poll_interval=float(settings.poll_interval),
        records=context.records,
    )


def probe(settings: EmailSettings, secrets: Mapping[str, str]) -> LoginProbe:
    """Log in to IMAP and SMTP with the password, as the adapter's start does."""

    async def check(seconds: float) -> str:
        from adapters.base import DeliveryError

        if absent := missing(settings):
            raise ProbeRefused(f"set {', '.join(absent)} in config.yaml")
        adapter = build(BuildContext(settings, secrets, None, frozenset()))

        async def nothing(_: object) -> None:
            return None

        try:
            await adapter.start(nothing, receive=False)
        except DeliveryError as error:
            if error.retryable:
                raise OSError(str(error)) from None
            raise ProbeRefused(str(error)) from None
        finally:
            await adapter.stop()
        return str(settings.address)

    return LoginProbe(check)


def access(settings: EmailSettings) -> AccessRules:
    return AccessRules(users=frozenset(settings.allowed_senders), require_mention=False)


SPEC = PlatformSpec(
    name=PLATFORM,
    title="Email",
    settings=EmailSettings,
    token=TOKEN,
    build=build,
    probe=probe,
    access=access,
    records=RECORDS,
)
