"""Email as a person using it sees it, against real Dovecot and Postfix (``tests/mail_server.py``):
what reaches the model of a reply (quoting, signature, HTML), who is never answered (strangers,
machines, lists), ``\\Seen`` only once stored (a restart reads each mail once), polling and IDLE, a
reply that threads in a mail program, and one sent again with its delivery key keeping its Message-ID.
The conformance suite covers the rest through the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any

import pytest

from adapters.base import ChatAddress, DeliveryError, InboundMessage, OutboundText, SinkUnavailable
from adapters.email import adapter as adapter_module
from adapters.email.adapter import EmailAdapter, Server
from adapters.email.inbound import read_mail
from adapters.email.settings import EmailSettings
from adapters.email.spec import probe
from gateway.doctor.findings import Finding
from gateway.doctor.platforms import Probe
from gateway.doctor.platforms import probe as doctor_probe
from tests.conformance.email_driver import EmailDriver
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until
from tests.mail_server import DOMAIN, PASSWORD

GMAIL_REPLY = """\
Friday at ten works for me.

Can you book the room?

On Mon, 30 Nov 2026 at 09:12, Herald <bot@example.org>
wrote:

> Shall we meet on Friday?
> I am free all morning.

--\x20
Ann Example
Head of Things
"""

HTML_ONLY = """\
<html><head><style>p { color: red }</style></head><body>
<div dir="ltr"><p>Please <b>summarise</b> the report.</p><div>Thanks!</div></div>
<div class="gmail_quote"><div>On Mon, Herald wrote:</div>
<blockquote class="gmail_quote">Here is the report you asked for.</blockquote></div>
</body></html>
"""


def mail(sender: str, to: str, text: str, **headers: str) -> EmailMessage:
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = sender, to, headers.pop("Subject", "A question")
    message["Message-ID"] = make_msgid(domain=DOMAIN)
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(text)
    return message


def test_what_reaches_the_model_is_what_the_person_wrote_this_time() -> None:
    reply = mail("ann@example.org", "bot@example.org", GMAIL_REPLY, Subject="Re: Friday")
    reply["In-Reply-To"] = "<answer@example.org>"
    html = mail("ann@example.org", "bot@example.org", "", Subject="Report")
    html.set_content(HTML_ONLY, subtype="html")

    replied, html_only = read_mail(reply.as_bytes(), "x"), read_mail(html.as_bytes(), "y")

    assert replied.text == "Friday at ten works for me.\n\nCan you book the room?"
    assert html_only.text == "Report\n\nPlease summarise the report.\n\nThanks!"  # a new thread: its subject


@pytest.fixture
def people() -> EmailDriver:
    return EmailDriver()  # fresh mailboxes on the shared servers (skips when they cannot run here)


class Sink:
    """The gateway's side: stores what it is handed (or refuses while ``refusing``)."""

    def __init__(self) -> None:
        self.stored: list[InboundMessage] = []
        self.refusing = 0

    async def __call__(self, batch: Sequence[InboundMessage]) -> None:
        if self.refusing:
            self.refusing -= 1
            raise SinkUnavailable("the database is away")
        self.stored.extend(batch)


@asynccontextmanager
async def reading(people: EmailDriver, sink: Sink, **options: Any) -> AsyncIterator[EmailAdapter]:
    adapter = EmailAdapter(
        address=people.bot,
        password=PASSWORD,
        imap=Server("127.0.0.1", people.server.imap_port, "none"),
        smtp=Server("127.0.0.1", people.server.smtp_port, "none"),
        allowed=[people.friend],
        retry_base=0.05,
        retry_cap=0.2,
        **options,
    )
    await adapter.start(sink)
    try:
        yield adapter
    finally:
        await adapter.stop()


async def test_only_an_allowed_person_is_handed_over_and_machines_are_never_answered(
    people: EmailDriver,
) -> None:
    sink = Sink()
    async with reading(people, sink) as adapter:
        for headers in ({"Auto_Submitted": "auto-replied"}, {"Precedence": "bulk"}, {"List_Id": "<news.x>"}):
            people.write(people.friend, mail(people.friend, people.bot, "out of office", **headers))
        people.write(people.stranger, mail(people.stranger, people.bot, "please answer me"))
        people.write(people.friend, mail(people.friend, people.bot, "a real question"))
        await people.delivered(adapter)
    assert [message.text for message in sink.stored] == ["A question\n\na real question"]
    assert people.replies(people.stranger) == []


async def test_a_mail_is_flagged_read_only_once_stored_and_a_restart_reads_it_once(
    people: EmailDriver,
) -> None:
    sink = Sink()
    sink.refusing = 2  # the database is away for the first two tries
    async with reading(people, sink) as adapter:
        people.dm(people.friend, "store me")
        await wait_until(lambda: sink.stored, what="the mail stored once the sink takes it")
        await people.delivered(adapter)  # and only now flagged \Seen
    async with reading(people, sink) as adapter:
        people.dm(people.friend, "and me")
        await people.delivered(adapter)
    assert [message.text for message in sink.stored] == ["store me", "and me"]


async def test_mail_that_waited_while_the_gateway_was_down_does_not_hold_up_its_start(
    people: EmailDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway takes messages only once it has started (its sink waits for what the last run left
    to be queued, which comes after the adapters start): a mailbox with unread mail must not keep the
    adapter's start waiting for the sink (it did, until its 30 s start timeout)."""
    monkeypatch.setattr(adapter_module, "START_TIMEOUT", 3600.0)  # a hang shows as one, not as 30 s
    people.dm(people.friend, "written while the gateway was down")
    await wait_until(lambda: people.server.mails(people.bot), what="the mail in the bot's mailbox")
    gateway_started = asyncio.Event()

    class StartedFirst(Sink):
        async def __call__(self, batch: Sequence[InboundMessage]) -> None:
            await gateway_started.wait()
            await super().__call__(batch)

    sink = StartedFirst()
    async with asyncio.timeout(WAIT_TIMEOUT):
        async with reading(people, sink) as adapter:
            gateway_started.set()
            await people.delivered(adapter)
    assert [message.text for message in sink.stored] == ["written while the gateway was down"]


async def test_without_idle_the_mailbox_is_polled(people: EmailDriver) -> None:
    sink = Sink()
    async with reading(people, sink, idle=False, poll_interval=0.05) as adapter:
        people.dm(people.friend, "polled")
        await people.delivered(adapter)
    assert [message.text for message in sink.stored] == ["polled"]


async def test_idle_is_issued_again_before_the_server_ends_it_and_mail_still_arrives(
    people: EmailDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    idles = 0
    original = EmailAdapter._wait_idle

    async def counted(self: EmailAdapter, client: Any) -> None:
        nonlocal idles
        idles += 1
        await original(self, client)

    monkeypatch.setattr(EmailAdapter, "_wait_idle", counted)
    sink = Sink()
    async with reading(people, sink, idle_renew=0.1) as adapter:
        await wait_until(lambda: idles >= 3, what="IDLE issued three times")
        people.dm(people.friend, "after a few renewals")
        await people.delivered(adapter)
    assert [message.text for message in sink.stored] == ["after a few renewals"]


async def test_a_reply_threads_in_a_mail_program_with_text_and_html(people: EmailDriver) -> None:
    sink = Sink()
    async with reading(people, sink) as adapter:
        question_mail = mail(people.friend, people.bot, "When do we meet?", Subject="Plans")
        asked = people.write(people.friend, question_mail)
        await wait_until(lambda: sink.stored, what="the question stored")
        [question] = sink.stored
        address = ChatAddress("email", question.chat_id, question.thread_id)
        answer = "**Friday** at ten."
        sent = await adapter.send(address, OutboundText(answer), reply_to=question.message_id)
        [reply] = people.replies(people.friend)
        # the person answers the reply with a program that sets only In-Reply-To
        thanks = mail(people.friend, people.bot, "Great!", Subject="Re: Plans", In_Reply_To=sent)
        people.write(people.friend, thanks)
        await wait_until(lambda: len(sink.stored) == 2, what="the answer to the reply stored")
    assert question.thread_id == asked and sink.stored[1].thread_id == asked  # one thread, one session
    assert reply["Subject"] == "Re: Plans" and people.bot in reply["From"]
    assert reply["In-Reply-To"] == asked and reply["References"] == asked
    assert reply["Auto-Submitted"] == "auto-replied"
    plain, html = reply.get_body(("plain",)), reply.get_body(("html",))
    assert isinstance(plain, EmailMessage) and isinstance(html, EmailMessage)
    assert plain.get_content().strip() == answer
    assert "<strong>Friday</strong>" in html.get_content()


async def test_a_reply_sent_again_with_its_key_is_the_same_mail_and_the_next_reply_another(
    people: EmailDriver,
) -> None:
    """SMTP cannot refuse a mail it has: a reply the outbox tries again (its first try was taken, and
    its answer lost) arrives twice, with the same Message-ID: a mail program that keeps one mail per
    Message-ID (Gmail) shows it once."""
    sink = Sink()
    async with reading(people, sink) as adapter:
        people.write(people.friend, mail(people.friend, people.bot, "Are you there?", Subject="Hello"))
        await wait_until(lambda: sink.stored, what="the question stored")
        [question] = sink.stored
        address = ChatAddress("email", question.chat_id, question.thread_id)
        first = await adapter.send(address, OutboundText("Yes."), key="7-abc")
        again = await adapter.send(address, OutboundText("Yes."), key="7-abc")
        other = await adapter.send(address, OutboundText("Yes."), key="8-abc")
    domain = people.bot.rpartition("@")[2]
    assert first == again == f"<herald.7-abc@{domain}>" and other == f"<herald.8-abc@{domain}>"
    arrived = [reply["Message-ID"] for reply in people.replies(people.friend)]
    assert sorted(arrived) == [first, first, other]  # in Postfix's order of delivery, not always sent's


async def test_a_wrong_password_is_refused_at_start_and_by_the_doctor(people: EmailDriver) -> None:
    adapter = EmailAdapter(
        address=people.bot,
        password="not-the-password",
        imap=Server("127.0.0.1", people.server.imap_port, "none"),
        smtp=Server("127.0.0.1", people.server.smtp_port, "none"),
        allowed=[],
    )
    with pytest.raises(DeliveryError, match="refused the login") as refused:
        await adapter.start(Sink())
    assert not refused.value.retryable
    settings = EmailSettings(**people.section())

    async def doctor(password: str) -> Finding:
        return await doctor_probe(
            Probe("email", "EMAIL_PASSWORD", probe(settings, {"EMAIL_PASSWORD": password})), 10
        )

    good, bad = await doctor(PASSWORD), await doctor("wrong")
    assert (good.status, good.text) == ("ok", f"login accepted ({people.bot}).")
    assert bad.status == "fail" and "refused EMAIL_PASSWORD" in bad.text and "wrong" not in bad.text
