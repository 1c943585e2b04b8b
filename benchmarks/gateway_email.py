"""Email through the whole gateway, against real Dovecot and Postfix on loopback (``tests/mail_server.py``):
the time from a person's mail being accepted by Postfix to the bot's reply lying in that person's
mailbox (first reply), and answers per second when many mails arrive at once.

Both legs go through the real mail system: the person's mail is submitted to Postfix, delivered into
Dovecot over LMTP, pushed to the bot by IMAP IDLE, stored, answered by the provider emulator (no
stream delay, in a process of its own), sent through Postfix with SMTP AUTH and delivered into the
person's Maildir, where it is seen. Every reply is matched to its question by ``In-Reply-To``: a
missing or doubled answer fails the "answered once" column.

    python -m benchmarks.gateway_email [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import email.policy
import os
import smtplib
import time
from collections import Counter
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import make_msgid
from tempfile import TemporaryDirectory

from benchmarks.concurrency import QUESTION, emulator_process
from benchmarks.gateway_harness import STORAGE_URL, fresh_home, ms, percentile, table
from gateway.app import open_gateway
from gateway.config import HeraldConfig
from tests.mail_server import DOMAIN, PASSWORD, MailServer

PARSER = BytesParser(policy=email.policy.default)
POLL = 0.002
TIMEOUT = 300.0
COLUMNS = ["measure", "mails", "answered once", "wall", "answers/s", "reply p50", "reply p99"]


def config(server: MailServer, bot: str, people: list[str], emulator_url: str) -> HeraldConfig:
    return HeraldConfig.model_validate(
        {
            "storage": {"url": STORAGE_URL.get()},
            "model": {"base_url": emulator_url},
            "gateway": {"http_port": 0, "stream_edit_interval": 0},
            "email": {
                "address": bot, "allowed_senders": people,
                "imap_host": "127.0.0.1", "imap_port": server.imap_port, "imap_security": "none",
                "smtp_host": "127.0.0.1", "smtp_port": server.smtp_port, "smtp_security": "none",
            },
        }
    )  # fmt: skip


def submit(server: MailServer, person: str, bot: str, text: str) -> tuple[str, float]:
    """One mail from ``person``, a thread of its own; its Message-ID and when Postfix accepted it."""
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = person, bot, text[:40]
    message["Message-ID"] = make_msgid(domain=DOMAIN)
    message.set_content(text)
    with smtplib.SMTP("127.0.0.1", server.smtp_port, timeout=30) as smtp:
        smtp.send_message(message)
    return str(message["Message-ID"]), time.monotonic()


class Replies:
    """The bot's replies as they land in the people's mailboxes, counted by the mail they answer."""

    def __init__(self, server: MailServer, people: list[str]) -> None:
        self.server, self.people = server, people
        self.counts: Counter[str] = Counter()  # In-Reply-To -> replies
        self.seen: dict[str, float] = {}  # In-Reply-To -> when its first reply was seen
        self._known: set[bytes] = set()

    async def wait(self, expected: int) -> None:
        """Until ``expected`` replies in all have arrived."""
        deadline = time.monotonic() + TIMEOUT
        while sum(self.counts.values()) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sum(self.counts.values())} of {expected} replies after {TIMEOUT} s")
            for person in self.people:
                for raw, _ in self.server.mails(person):
                    if raw not in self._known:
                        self._known.add(raw)
                        answered = str(PARSER.parsebytes(raw).get("In-Reply-To", ""))
                        self.counts[answered] += 1
                        self.seen.setdefault(answered, time.monotonic())
            await asyncio.sleep(POLL)


async def measure(
    server: MailServer, name: str, senders: int, per_sender: int, *, one_at_a_time: bool
) -> list[str]:
    bot, people = server.mailbox(), [server.mailbox() for _ in range(senders)]
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url:
        async with open_gateway(
            config(server, bot, people, url), fresh_home(tmp), environ={"EMAIL_PASSWORD": PASSWORD}
        ):
            got = Replies(server, people)
            sent: dict[str, float] = {}
            if one_at_a_time:
                submit(server, people[0], bot, QUESTION)  # the first turn warms up
                await got.wait(1)
                for n in range(senders * per_sender):
                    message_id, at = submit(server, people[n % senders], bot, QUESTION)
                    sent[message_id] = at
                    await got.wait(n + 2)
            else:
                for _ in range(per_sender):
                    for person in people:
                        message_id, at = await asyncio.to_thread(submit, server, person, bot, QUESTION)
                        sent[message_id] = at
                await got.wait(len(sent))
    counts, seen = got.counts, got.seen
    once = sum(1 for message_id in sent if counts[message_id] == 1)
    delays = [seen[message_id] - at for message_id, at in sent.items() if message_id in seen]
    wall = max(seen[m] for m in sent) - min(sent.values())
    return [
        name, str(len(sent)), f"{once}/{len(sent)}", f"{wall:.2f} s", f"{once / wall:.1f}",
        ms(percentile(delays, 50)), ms(percentile(delays, 99)),
    ]  # fmt: skip


async def main_async(quick: bool) -> str:
    server = MailServer()
    server.start()
    try:
        rows = [
            await measure(
                server, "first reply, one mail at a time", 4, 3 if quick else 10, one_at_a_time=True
            ),
            await measure(server, "100 mails at once (50 senders × 2)", 50, 2, one_at_a_time=False),
        ]
    finally:
        server.stop()
    return table(COLUMNS, rows)


def main() -> None:
    os.environ.setdefault("ANTHROPIC_API_KEY", "benchmark")  # the provider emulator takes any key
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer one-at-a-time mails")
    print(asyncio.run(main_async(parser.parse_args().quick)))


if __name__ == "__main__":
    main()
