"""The conformance suite's driver for email: real Dovecot and Postfix (``tests/mail_server.py``), the
bot's mailbox read by the real aioimaplib and answered through the real aiosmtplib.

People write with smtplib to Postfix, which delivers to Dovecot; what the bot sent is read back from
their own mailboxes (Dovecot's Maildirs, which also show what the bot flagged read). A person's
direct chat is a conversation (a thread of mails, by ``References``); a thread is another conversation
of the friend's. Email has no
shared chat: the suite's shared chat is the friend's conversation, and the scenarios about shared
chats, the command menu, pairing codes and 429s are skipped (``absent``). Each driver has mailboxes of
its own on the servers the whole test session shares.
"""

from __future__ import annotations

import email.policy
import itertools
import smtplib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import make_msgid
from types import MappingProxyType
from typing import Any

import pytest

from adapters.base import Adapter
from adapters.email.spec import SPEC
from tests.conformance.driver import Driver, Place, Seen, Sent, markdown_bold, markdown_code, markdown_words
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until, wait_until_sync
from tests.mail_server import DOMAIN, PASSWORD, MailMissing, MailServer, shared_mail_server

_PARSER = BytesParser(policy=email.policy.default)


class EmailDriver(Driver):
    spec = SPEC
    rate_limit_burst = 0
    shared_chats = False
    absent = MappingProxyType(
        {
            "shared chats": "a mail is written to the bot alone (Cc-ing it into a conversation is not read)",
            "rate limits": "SMTP refuses with 4xx and no time to wait: the outbox's backoff retries",
            "command menu": "a mailbox has no command menu (/help in a mail lists the commands)",
            "pairing": "mail from a stranger is never answered (a From can be forged)",
        }
    )

    def __init__(self) -> None:
        try:
            self.server: MailServer = shared_mail_server()
        except MailMissing as error:
            pytest.skip(str(error))
        self.bot, self.admin, self.friend, self.stranger = (self.server.mailbox() for _ in range(4))
        self._threads = itertools.count(1)
        self._last: dict[str, str] = {}  # a thread's first Message-ID -> its latest one
        self._written = 0  # mails people sent to the bot

    # --- the servers ----------------------------------------------------------------------------

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        yield self.section()

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        yield self.section()

    def section(self, **more: Any) -> dict[str, Any]:
        """The email section of config.yaml for the bot's mailbox (the friend allowed)."""
        return {
            "address": self.bot,
            "imap_host": "127.0.0.1",
            "imap_port": self.server.imap_port,
            "imap_security": "none",
            "smtp_host": "127.0.0.1",
            "smtp_port": self.server.smtp_port,
            "smtp_security": "none",
            "allowed_senders": [self.friend],
            **more,
        }

    def environ(self) -> dict[str, str]:
        return {SPEC.token.env: PASSWORD}

    async def delivered(self, adapter: Adapter) -> None:
        """Every mail people wrote is in the bot's mailbox and flagged read (which the adapter does only
        once the sink stored it)."""
        await wait_until(self._all_read, WAIT_TIMEOUT, what="every mail to the bot read and stored")

    def _all_read(self) -> bool:
        if not self.server.queue_empty():
            return False
        mails = self.server.mails(self.bot)
        return len(mails) >= self._written and all(seen for _, seen in mails)

    def receiving(self) -> bool:
        return self.server.logged_in(self.bot)

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        message = self._mail(user, self.dm_place(user), text)
        if document is not None:
            name, data = document
            message.add_attachment(data, maintype="text", subtype="plain", filename=name)
        if photo is not None:
            message.add_attachment(photo, maintype="image", subtype="png", filename="photo.png")
        return self._send(user, message)

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        return self._send(user, self._mail(user, place or self.group_place(), text))

    def thread(self) -> Place:
        return Place(self.friend, f"<thread{next(self._threads)}.{self.friend}>")

    def command(self, user: str, name: str, place: Place) -> Sent:
        return self._send(user, self._mail(user, place, f"/{name}"))

    async def redeliver(self, sent: Sent) -> None:
        """The same mail (its Message-ID) arrives again, as a second delivery or a restored backup does."""
        self._deliver(sent.place.chat_id, bytes(sent.raw))

    def fail_sends(self, count: int, retry_after: float) -> None:
        raise NotImplementedError("SMTP has no retry-after: the scenario is skipped for email")

    def _mail(self, user: str, place: Place, text: str) -> EmailMessage:
        """A mail from ``user`` in the conversation ``place``: its first mail starts the thread."""
        assert place.thread_id is not None
        message = EmailMessage()
        message["From"] = user
        message["To"] = self.bot
        latest = self._last.get(place.thread_id)
        if latest is None:
            message["Subject"] = text.splitlines()[0] if text else "hello"
            message_id = place.thread_id
        else:
            message["Subject"] = "Re: a conversation"
            message["In-Reply-To"] = latest
            message["References"] = f"{place.thread_id} {latest}" if latest != place.thread_id else latest
            message_id = make_msgid(domain=DOMAIN)
        message["Message-ID"] = message_id
        message.set_content(text)
        self._last[place.thread_id] = message_id
        return message

    def _send(self, user: str, message: EmailMessage) -> Sent:
        raw = message.as_bytes()
        self._deliver(user, raw)
        thread = str(message.get("References", message["Message-ID"])).split()[0]
        return Sent(Place(user, thread), str(message["Message-ID"]), raw)

    def write(self, user: str, message: EmailMessage) -> str:
        """``user`` sends the bot a mail written by the test; returns its Message-ID."""
        self._deliver(user, message.as_bytes())
        return str(message["Message-ID"])

    def _deliver(self, user: str, raw: bytes) -> None:
        with smtplib.SMTP("127.0.0.1", self.server.smtp_port, timeout=WAIT_TIMEOUT) as smtp:
            smtp.sendmail(user, [self.bot], raw)
        self._written += 1

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(user, f"<conversation.{user}>")

    def group_place(self) -> Place:
        return self.dm_place(self.friend)

    def messages(self, place: Place) -> list[Seen]:
        seen = []
        for message in self._from_bot(place):
            body = message.get_body(preferencelist=("plain",))
            plain = (
                body.get_content().replace("\r\n", "\n").removesuffix("\n")
                if isinstance(body, EmailMessage)
                else ""
            )
            seen.append(
                Seen(
                    message_id=str(message["Message-ID"]),
                    text=markdown_words(plain),
                    code=markdown_code(plain),
                    bold=markdown_bold(plain),
                    length=len(plain),
                    versions=1,
                )
            )
        return seen

    def send_times(self) -> list[float]:
        return []

    def published_commands(self) -> set[str]:
        return set()

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        return [
            (part.get_filename() or "", bytes(part.get_payload(decode=True)))
            for message in self._from_bot(place)
            for part in message.iter_attachments()
        ]

    def replies(self, user: str) -> list[EmailMessage]:
        """Every mail the bot sent to ``user``, oldest first (once Postfix delivered what it took)."""
        wait_until_sync(self.server.queue_empty, WAIT_TIMEOUT, what="Postfix's queue delivered")
        found = []
        for raw, _ in self.server.mails(user):
            message = _PARSER.parsebytes(raw)
            assert isinstance(message, EmailMessage)
            if self.bot in str(message["From"]):
                found.append(message)
        return found

    def _from_bot(self, place: Place) -> list[EmailMessage]:
        return [message for message in self.replies(place.chat_id) if _thread_of(message) == place.thread_id]


def _thread_of(message: EmailMessage) -> str | None:
    chain = str(message.get("References", "") or message.get("In-Reply-To", "")).split()
    return chain[0] if chain else None
