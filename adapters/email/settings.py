"""Email's section of ``config.yaml`` and the names it refers to (no client library: read at every start)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, field_validator

from adapters.records import RecordsPolicy
from adapters.spec import PlatformSettings

PLATFORM = "email"  # InboundMessage.platform, the config section, session keys, admins' ids
RECORDS = RecordsPolicy(keep_after_expiry=24 * 3600)  # each thread's subject and references

Security = Literal["tls", "starttls", "none"]


def address_of(value: str) -> str:
    """An address as Herald compares them: trimmed, lower case (``Ann@Example.org`` is ann@example.org)."""
    return value.strip().lower()


class EmailSettings(PlatformSettings):
    """The bot's mailbox: enabled when EMAIL_PASSWORD is set (environment or .env, never here). Mail is
    read from IMAP and answered through SMTP with the same account. Only mail from allowed_senders (and
    gateway.admins' email: ids) reaches the model; anyone else's is read and left unanswered. Use a
    mailbox of its own: every unread message of it is read, and marked read once stored."""

    address: str | None = Field(
        None, description="The bot's address: its replies come From it (bot@example.org)."
    )
    name: str = Field("Herald", description="The name shown with the address in the From of replies.")
    username: str | None = Field(
        None, description="The IMAP and SMTP login, when it is not the address itself."
    )
    imap_host: str | None = Field(
        None, description="The IMAP server, e.g. imap.gmail.com or imap.fastmail.com."
    )
    imap_port: StrictInt = Field(993, ge=1, le=65535, description="The IMAP port (993: TLS).")
    imap_security: Literal["tls", "none"] = Field(
        "tls", description="tls (port 993), or none (only for a server on this machine)."
    )
    smtp_host: str | None = Field(
        None, description="The SMTP server, e.g. smtp.gmail.com or smtp.fastmail.com."
    )
    smtp_port: StrictInt = Field(465, ge=1, le=65535, description="The SMTP port (465: TLS; 587: STARTTLS).")
    smtp_security: Security = Field(
        "tls", description="tls (port 465), starttls (port 587), or none (only for a server on this machine)."
    )
    mailbox: str = Field("INBOX", description="The IMAP folder the bot reads.")
    allowed_senders: list[str] = Field(
        default_factory=list,
        description="Addresses whose mail is answered (besides gateway.admins' email:address ids). Mail "
        "from anyone else never reaches the model and gets no reply: a From can be forged.",
    )
    idle: StrictBool = Field(
        True, description="Wait for new mail with IMAP IDLE when the server offers it; off: poll."
    )
    poll_interval: StrictFloat | StrictInt = Field(
        60, gt=0, le=3600, description="Seconds between checks for new mail when the server has no IDLE."
    )

    @field_validator("allowed_senders")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        for item in value:
            if "@" not in item:
                raise ValueError(f"{item!r} is not an email address (name@example.org)")
        return [address_of(item) for item in value]

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and "@" not in value:
            raise ValueError(f"{value!r} is not an email address (bot@example.org)")
        return address_of(value) if value else value
