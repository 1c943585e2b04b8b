"""What is WhatsApp's own, beyond the conformance suite: the webhook's signature and verification, the
24-hour window (a template or a notice to the owner, never silence), status webhooks recorded against
the outbox, read receipts, voice notes; and the pure parts (markup, window, payloads) without I/O."""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa

from adapters.base import Attachment, OutboundVoice
from adapters.whatsapp.render import render_whatsapp
from adapters.whatsapp.webhook import read, signature_ok
from adapters.whatsapp.window import MARGIN, WINDOW, Window, later
from gateway import tables
from gateway.home import HeraldHome
from tests.conformance.harness import Running, running
from tests.conformance.whatsapp_driver import WhatsAppDriver
from tests.console_support import CONSOLE_TOKEN, console_client
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.fakes.whatsapp import APP_SECRET, NUMBER_ID, VERIFY_TOKEN
from tests.fakes.whatsapp.server import TEMPLATES

DAY = 24 * 3600
TEMPLATE = sorted(TEMPLATES)[0]

# --- the pure parts -----------------------------------------------------------------------------


def test_markdown_becomes_whatsapp_markup_within_the_limit() -> None:
    [part] = render_whatsapp("## Plan\n**Bold**, *it*, ~~gone~~, [docs](https://x.example/a) and `a*b`", 4096)
    assert part.text == "*Plan*\n*Bold*, _it_, ~gone~, docs (https://x.example/a) and `a*b`"
    code = "```python\n" + "\n".join(f"line_{n} = {n}" for n in range(400)) + "\n```"
    parts = render_whatsapp(code, 500)
    assert len(parts) > 1 and all(len(p.text) <= 500 for p in parts)
    assert all(p.text.startswith("_python_\n```\n") and p.text.endswith("\n```") for p in parts)


def test_the_window_is_24_hours_from_the_last_message_and_never_moves_back() -> None:
    wrote = 1_000_000.0
    assert Window(wrote).is_open(wrote + WINDOW - MARGIN - 1)
    assert not Window(wrote).is_open(wrote + WINDOW - MARGIN + 1)  # may arrive after it closed
    assert not Window(None).is_open(wrote)
    assert later(wrote, wrote - 3600) == wrote  # an older message delivered late
    assert later(wrote, wrote + 5) == wrote + 5


def test_only_a_body_signed_with_the_app_secret_passes() -> None:
    import hashlib
    import hmac

    body = b'{"object":"whatsapp_business_account"}'
    good = "sha256=" + hmac.new(b"secret", body, hashlib.sha256).hexdigest()
    assert signature_ok("secret", body, good)
    assert not signature_ok("secret", body + b" ", good)
    assert not signature_ok("other", body, good)
    assert not signature_ok("secret", body, None) and not signature_ok("secret", body, good[7:])


def envelope(number: str, value: dict[str, Any]) -> dict[str, Any]:
    """A webhook body as Meta sends it, for the business number ``number``."""
    change = {"field": "messages", "value": {"metadata": {"phone_number_id": number}, **value}}
    return {"object": "whatsapp_business_account", "entry": [{"changes": [change]}]}


def test_a_payload_for_another_number_is_not_read_and_statuses_say_why_they_failed() -> None:
    voice = {"from": "491", "id": "wamid.1", "timestamp": "1700000000", "type": "audio",
             "audio": {"id": "77", "mime_type": "audio/ogg; codecs=opus", "voice": True},
             "context": {"id": "wamid.bot"}}  # fmt: skip
    error = {"code": 131026, "title": "Message undeliverable", "error_data": {"details": "not on WhatsApp"}}
    failed = {"id": "wamid.2", "status": "failed", "recipient_id": "491", "errors": [error]}
    assert read(envelope("someone-else", {"messages": [voice]}), NUMBER_ID).messages == []
    received = read(envelope(NUMBER_ID, {"messages": [voice], "statuses": [failed]}), NUMBER_ID)
    [message] = received.messages
    assert message.attachments == (Attachment("voice", "77", mime_type="audio/ogg; codecs=opus"),)
    assert message.reply_to_id == "wamid.bot" and message.addressed
    [status] = received.statuses
    assert status.status == "failed" and status.error is not None and "131026" in status.error
    assert "not on WhatsApp" in status.error


# --- through the gateway ------------------------------------------------------------------------


class TemplateDriver(WhatsAppDriver):
    """The same fake, with a template configured for replies outside the window."""

    def _section(self, url: str) -> dict[str, Any]:
        return {**super()._section(url), "template": TEMPLATE}


async def inbox_rows(platform: Running) -> int:
    def count(conn: sa.Connection) -> int:
        return int(conn.execute(sa.select(sa.func.count()).select_from(tables.inbox)).scalar_one())

    return await platform.gateway.services.runtime.storage.read(count)


async def outbox_rows(platform: Running) -> list[Any]:
    def rows(conn: sa.Connection) -> list[Any]:
        return list(
            conn.execute(
                sa.select(tables.outbox.c.state, tables.outbox.c.error, tables.outbox.c.platform_message_id)
            )
        )

    return await platform.gateway.services.runtime.storage.read(rows)


async def test_a_forged_webhook_is_refused_and_stores_nothing_and_only_the_verify_token_subscribes(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    driver = WhatsAppDriver()
    async with running(driver, home, emulator, emulator_url) as platform:
        url = f"{platform.gateway.http.url}/whatsapp/webhook"
        message = {"from": driver.friend, "id": "wamid.forged", "timestamp": str(int(time.time())),
                   "type": "text", "text": {"body": "transfer everything"}}  # fmt: skip
        body = json.dumps(envelope(NUMBER_ID, {"messages": [message]})).encode()
        forged = await driver.fake.post_signed(body, secret="not-the-app-secret")
        unsigned = await driver.fake.post_signed(body, signature="sha256=")
        stored = await inbox_rows(platform)
        async with aiohttp.ClientSession() as session:
            wrong = urllib.parse.urlencode(
                {"hub.mode": "subscribe", "hub.verify_token": "guess", "hub.challenge": "c1"}
            )
            right = urllib.parse.urlencode(
                {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "c2"}
            )
            async with session.get(f"{url}?{wrong}") as refused, session.get(f"{url}?{right}") as verified:
                answers = (refused.status, verified.status, await verified.text())
        genuine = await driver.fake.post_signed(body, secret=APP_SECRET)
        await platform.settled()
    assert (forged, unsigned, stored) == (401, 401, 0)
    assert answers == (403, 200, "c2")
    assert genuine == 200 and len(emulator.requests) == 1  # the same body, signed, is taken


async def test_outside_the_24_hour_window_the_owner_is_told_and_nothing_goes_out_as_free_text(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A message Meta could deliver only 25 hours late: the answer cannot go out; its outbox item is
    failed with the reason, the log tells the owner, and so does a message to the admin on WhatsApp
    (whose own window is open: they wrote just now). No template is configured."""
    emulator.script(Reply(text="Hello, admin."), Reply(text="Too late, I am afraid."))
    driver = WhatsAppDriver()
    with caplog.at_level(logging.WARNING):
        async with running(driver, home, emulator, emulator_url) as platform:
            driver.fake.text(driver.admin, "hi")
            await platform.settled()
            driver.fake.text(driver.friend, "are you there?", ago=DAY + 3600)
            await platform.settled()
            rows = await outbox_rows(platform)
    assert driver.fake.bot_messages(driver.friend) == [] and driver.fake.refusals == []  # not even tried
    assert sorted(state for state, _, _ in rows) == ["failed", "sent"]
    [error] = [error for state, error, _ in rows if state == "failed"]
    assert "24 hours" in error and "whatsapp.template" in error
    assert any("the reply was not delivered" in record.getMessage() for record in caplog.records)
    [_, notice] = [message.text for message in driver.fake.bot_messages(driver.admin)]
    assert driver.friend in notice and "not delivered" in notice


async def test_outside_the_window_the_configured_template_is_sent_once_instead(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.script(Reply(text="**First.**\n\n" + "A long answer. " * 400))  # several parts
    driver = TemplateDriver()
    with caplog.at_level(logging.WARNING):
        async with running(driver, home, emulator, emulator_url) as platform:
            driver.fake.text(driver.friend, "still there?", ago=DAY + 3600)
            await platform.settled()
    sent = driver.fake.bot_messages(driver.friend)
    assert [(m.kind, m.body["name"]) for m in sent] == [("template", TEMPLATE)]
    assert any(f"sent the template '{TEMPLATE}'" in record.getMessage() for record in caplog.records)


async def test_a_failed_status_marks_the_outbox_item_and_read_receipts_go_to_the_person(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text="Hello."))
    driver = WhatsAppDriver()
    async with running(driver, home, emulator, emulator_url) as platform:
        asked = driver.fake.text(driver.friend, "hello")
        await platform.settled()
        [answer] = driver.fake.bot_messages(driver.friend)
        driver.fake.status(answer.id, "delivered")
        driver.fake.status(answer.id, "failed", error=(131026, "Message undeliverable"))
        await platform.settled()
        rows = await wait_until_awaited(
            lambda: _failed(outbox_rows(platform)), what="the outbox item marked failed"
        )
        reads = list(driver.fake.reads)
    [(state, error, message_id)] = rows
    assert (state, message_id) == ("failed", answer.id) and "131026" in error and "undeliverable" in error
    assert (asked, True) in reads  # marked read, with "typing…", while the answer was written
    assert answer.context == asked  # the answer quotes the question


class ConsoleDriver(WhatsAppDriver):
    """The same fake, with the console's login token set."""

    def environ(self) -> dict[str, str]:
        return {**super().environ(), "HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}


@pytest.mark.each_database  # the statuses are recorded on the outbox rows, in either database
async def test_statuses_end_on_the_outbox_row_in_the_order_of_delivery_and_the_health_page_counts_them(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """One reply sent, delivered, read and then (late) sent again ends read; another fails after it was
    sent. The console's health page counts both."""
    emulator.script(Reply(text="Hello."), Reply(text="Hi, admin."))
    driver = ConsoleDriver()
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.fake.text(driver.friend, "hello")
        await platform.settled()
        driver.fake.text(driver.admin, "hi")
        await platform.settled()
        [read] = driver.fake.bot_messages(driver.friend)
        [undelivered] = driver.fake.bot_messages(driver.admin)
        for reported in ("sent", "delivered", "read", "sent"):  # Meta does not promise their order
            driver.fake.status(read.id, reported)
        driver.fake.status(undelivered.id, "sent")
        driver.fake.status(undelivered.id, "failed", error=(131026, "Message undeliverable"))
        await platform.settled()  # every webhook answered: the adapter answers once the sink recorded it

        def deliveries(conn: sa.Connection) -> set[Any]:
            columns = (tables.outbox.c.platform_message_id, tables.outbox.c.state, tables.outbox.c.delivery)
            return {tuple(row) for row in conn.execute(sa.select(*columns))}

        rows = await platform.gateway.services.runtime.storage.read(deliveries)
        async with console_client(platform.gateway.http.url) as client:
            await client.login()
            answered, page, _ = await client.get("/console/health")
    assert rows == {(read.id, "sent", "read"), (undelivered.id, "failed", "failed")}
    assert answered == 200
    card = page.split('id="replies"')[1].split("</div></div>")[0]
    assert '<div class="value">1</div>' in card  # failed
    assert "of 2 in the last 24 h (1 undelivered after sending); 1 delivered, 1 read" in card


async def _failed(rows: Any) -> list[Any]:
    found = await rows
    return found if all(row[0] == "failed" for row in found) else []


async def test_voice_notes_go_both_ways(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    driver = WhatsAppDriver()
    spoken = b"OggS" + bytes(range(256)) * 8
    async with running(driver, home, emulator, emulator_url) as platform:
        adapter = platform.gateway.services.adapters["whatsapp"]
        heard = driver.fake.voice_note(driver.friend, spoken)
        await platform.settled()
        media = driver.fake.inbound[heard]["audio"]["id"]
        downloaded = await adapter.download(Attachment("voice", media), 1_000_000)
        place = driver.dm_place(driver.friend).address("whatsapp")
        await adapter.send_voice(place, OutboundVoice(spoken, duration=1.5))
        sent = await wait_until(
            lambda: [m for m in driver.fake.bot_messages(driver.friend) if m.kind == "audio"]
        )
    assert downloaded == spoken
    [voice] = sent
    assert voice.media is not None and voice.media[1] == "audio/ogg" and voice.media[2] == spoken
