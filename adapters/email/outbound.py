"""A reply as a mail: in its thread (``In-Reply-To``, ``References``, "Re: " subject), From the bot,
the model's Markdown as text/plain (which reads well as it is) with a simple HTML alternative, and the
headers that keep other machines from answering it (``Auto-Submitted: auto-replied``, RFC 3834).
Its ``Message-ID`` comes from the delivery key when there is one (:func:`message_id`). Pure: what to
say in, an :class:`email.message.EmailMessage` out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import pyromark
from lxml_html_clean import Cleaner

MAX_REFERENCES = 20  # the thread's first message and the latest ones (RFC 5322 lets a client trim)
_RE = re.compile(r"^\s*((re|aw|sv|antw)\s*(\[\d+\])?\s*:\s*)+", re.I)
_OPTIONS = (
    pyromark.Options.ENABLE_STRIKETHROUGH | pyromark.Options.ENABLE_TABLES | pyromark.Options.ENABLE_TASKLISTS
)
_CLEANER = Cleaner(
    scripts=True, javascript=True, comments=True, style=True, inline_style=True, links=True, meta=True,
    page_structure=True, processing_instructions=True, embedded=True, frames=True, forms=True,
    remove_unknown_tags=True, safe_attrs_only=True, host_whitelist=(),
)  # fmt: skip
_STYLE = "font-family: sans-serif; line-height: 1.4"


@dataclass(frozen=True)
class Thread:
    """What a reply needs of its thread: its subject and its chain of Message-IDs, oldest first."""

    subject: str
    references: tuple[str, ...]

    def after(self, message_id: str) -> Thread:
        """The thread once ``message_id`` joined it."""
        if message_id in self.references:
            return self
        return Thread(self.subject, trimmed((*self.references, message_id)))


def trimmed(references: tuple[str, ...]) -> tuple[str, ...]:
    if len(references) <= MAX_REFERENCES:
        return references
    return (references[0], *references[-(MAX_REFERENCES - 1) :])


def reply_subject(subject: str) -> str:
    """``Re: `` and the subject, once ("Re: Re: AW: x" is "Re: x")."""
    bare = _RE.sub("", subject).strip()
    return f"Re: {bare}" if bare else "Re: your message"


@dataclass(frozen=True)
class Envelope:
    """Who writes to whom: the bot (``sender``, shown as ``name``) to one person."""

    sender: str
    name: str
    to: str


def message_id(sender: str, key: str | None) -> str:
    """A mail's ``Message-ID``, in the domain of the bot's address ``sender``.

    With a delivery key (``adapters.base``) it is the key's: every attempt at one reply is then the same
    mail, and a mail program that keeps one mail per Message-ID (Gmail does) shows a resent reply once
    (the SMTP server accepted it, and the process died or the server's last answer was lost before it
    was recorded sent). Most programs show both copies, and the recipient's server still receives
    two: SMTP has no way to say "this one you have". The key is unique per reply, so no other mail
    shares its Message-ID (which would hide it). Without a key: a fresh one, as ``make_msgid`` makes."""
    domain = sender.rpartition("@")[2]
    if key is None:
        return make_msgid(domain=domain or None)
    return f"<herald.{key}@{domain or 'herald.invalid'}>"


def compose(
    envelope: Envelope, thread: Thread, reply_to: str | None, markdown: str, key: str | None = None
) -> EmailMessage:
    """A reply in ``thread`` (to ``reply_to``, else to its latest message) saying ``markdown``; ``key``:
    its delivery key (:func:`message_id`)."""
    message = _headers(envelope, thread, reply_to, key)
    message.set_content(markdown, subtype="plain", charset="utf-8")
    message.add_alternative(to_html(markdown), subtype="html", charset="utf-8")
    return message


def compose_file(
    envelope: Envelope, thread: Thread, reply_to: str | None, name: str, data: bytes, mime_type: str
) -> EmailMessage:
    """A mail in ``thread`` carrying one file."""
    message = _headers(envelope, thread, reply_to, None)
    message.set_content(f"Attached: {name}", subtype="plain", charset="utf-8")
    maintype, _, subtype = mime_type.partition("/")
    if not subtype:
        maintype, subtype = "application", "octet-stream"
    message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return message


def _headers(envelope: Envelope, thread: Thread, reply_to: str | None, key: str | None) -> EmailMessage:
    message = EmailMessage()
    message["From"] = Address(envelope.name, addr_spec=envelope.sender)
    message["To"] = envelope.to
    message["Subject"] = reply_subject(thread.subject)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = message_id(envelope.sender, key)
    parent = reply_to or (thread.references[-1] if thread.references else None)
    if parent is not None:
        message["In-Reply-To"] = parent
        chain = thread.references if parent in thread.references else (*thread.references, parent)
        message["References"] = " ".join(trimmed(chain))
    message["Auto-Submitted"] = "auto-replied"  # RFC 3834: no vacation notice or bot answers it
    message["X-Auto-Response-Suppress"] = "All"  # the same, in Exchange's words
    return message


def to_html(markdown: str) -> str:
    """The Markdown as a small HTML page: rendered by pulldown-cmark, then cleaned (no scripts, styles,
    forms, embedded content or event attributes, whatever the model wrote)."""
    body = _CLEANER.clean_html(f"<div>{pyromark.html(markdown, options=_OPTIONS)}</div>")
    return f'<!DOCTYPE html>\n<html><body><div style="{_STYLE}">{body}</div></body></html>\n'
