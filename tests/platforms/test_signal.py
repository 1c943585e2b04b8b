"""Signal: what a person on Signal notices beyond the conformance suite (``tests/conformance``): a
stream that dies is replaced and what was written meanwhile is answered once; in a group the bot
answers a mention or a reply to it, quotes what it answers and shows it is typing; envelopes become
messages as Signal means them (mentions, quotes, voice notes); answers keep their styles."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.base import Attachment, ChatType, DeliveryError, InboundMessage
from adapters.signal.adapter import SignalAdapter
from adapters.signal.inbound import Me, to_inbound
from adapters.signal.render import render_signal
from adapters.signal.settings import SignalSettings
from gateway.app import open_gateway
from gateway.home import HeraldHome
from tests.conformance.harness import Running, gateway_settings, user_texts
from tests.conformance.signal_driver import SignalDriver, seen
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.signal import BOT, BOT_UUID, GROUP

ME = Me(BOT, BOT_UUID, "Herald")


def envelope(data: dict[str, Any], source: str = "+15550000003") -> dict[str, Any]:
    return {"envelope": {"sourceNumber": source, "sourceUuid": "u-1", "sourceName": "Ann", "timestamp": 5,
                         "dataMessage": {"timestamp": 5, **data}}, "account": BOT}  # fmt: skip


def test_a_mention_of_the_bot_reads_as_its_name_and_addresses_it() -> None:
    group = {"groupInfo": {"groupId": GROUP, "groupName": "Team", "type": "DELIVER"}}
    mention = {"message": "hi \ufffc and \ufffc!", **group, "mentions": [
        {"number": BOT, "uuid": BOT_UUID, "start": 3, "length": 1},
        {"number": "+15550000009", "uuid": "u-9", "start": 9, "length": 1},
    ]}  # fmt: skip
    message = to_inbound(envelope(mention), ME, set())
    assert message is not None and message.chat_type is ChatType.GROUP and message.chat_id == f"group:{GROUP}"
    assert message.text == "hi @Herald and @+15550000009!" and message.addressed
    assert message.message_id == "5:+15550000003" and message.chat_title == "Team"
    chatter = to_inbound(envelope({"message": "lunch?", **group}), ME, {"help"})
    quote = {"id": 4, "authorNumber": BOT}
    reply = to_inbound(envelope({"message": "and?", **group, "quote": quote}), ME, set())
    command = to_inbound(envelope({"message": "/help", **group}), ME, {"help"})
    assert chatter is not None and not chatter.addressed
    assert reply is not None and reply.addressed and reply.reply_to_id == f"4:{BOT}"
    assert command is not None and command.addressed


def test_what_is_not_a_persons_message_is_not_handed_over_and_a_voice_note_is_a_voice() -> None:
    assert to_inbound(envelope({"message": "mine"}, source=BOT), ME, set()) is None
    typing = {"envelope": {"sourceNumber": "+1555", "typingMessage": {"action": "STARTED"}}}
    assert to_inbound(typing, ME, set()) is None
    assert to_inbound(envelope({"message": None, "reaction": {"emoji": "👍"}}), ME, set()) is None
    note = {"contentType": "audio/aac", "id": "v1", "size": 9}
    voice = to_inbound(envelope({"attachments": [note]}), ME, set())
    assert voice is not None and [(a.kind, a.file_id) for a in voice.attachments] == [("voice", "v1")]


def test_an_answer_keeps_its_styles_and_shows_a_links_address() -> None:
    [part] = render_signal("**Done**: see [the docs](https://example.com/d) or `x = 1`.\n\n~~old~~", 2000)
    styles = {(part.text[e.offset : e.offset + e.length], e.type) for e in part.entities}
    assert part.text == "Done: see the docs (https://example.com/d) or x = 1.\n\nold"
    assert styles == {("Done", "bold"), ("x = 1", "code"), ("old", "strikethrough")}


def test_an_answer_whose_layout_would_explode_is_sent_as_plain_text_quickly() -> None:
    """The conversion Telegram's renderer makes, with its guard: 10,000 characters of nested list
    items would otherwise lay out as tens of millions."""
    markdown = "- " * 5000 + "x"
    started = time.process_time()  # this process's CPU time: a loaded machine does not stretch it
    parts = render_signal(markdown, 2000)
    assert time.process_time() - started < 2
    assert all(not part.entities for part in parts)
    assert "".join(part.text for part in parts).replace(" ", "") == markdown.replace(" ", "")


async def test_a_silent_stream_is_replaced_and_what_was_written_meanwhile_is_answered_once(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    driver = SignalDriver()
    driver.fake.keepalive = 0.05
    emulator.script(*(Reply(text=f"answer {n}") for n in range(3)))
    place = driver.dm_place(driver.friend)
    async with driver.serving() as section:
        section["stream_timeout"] = 0.5
        async with running_on(driver, section, home, emulator, emulator_url) as platform:
            first = driver.dm(driver.friend, "first")
            await platform.settled()
            driver.fake.stall_streams()  # the connection goes dead: no events, no keep-alives
            driver.dm(driver.friend, "second")
            driver.dm(driver.friend, "third")
            await driver.redeliver(first)  # and signal-cli hands the first over again
            await driver.fake.wait_for(lambda: len(driver.messages(place)) == 3, what="three answers")
            await platform.settled()
            answers = [message.text for message in driver.messages(place)]
    assert answers == ["answer 0", "answer 1", "answer 2"]
    assert [user_texts(request)[-1] for request in emulator.requests] == ["first", "second", "third"]


async def test_in_a_group_the_bot_quotes_what_it_answers_and_a_reply_to_it_is_answered(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    driver = SignalDriver()
    emulator.script(Reply(text="It is **Friday**."), Reply(text="At noon."))
    place = driver.group_place()
    async with (
        driver.serving() as section,
        running_on(driver, section, home, emulator, emulator_url) as platform,
    ):
        asked = driver.group(driver.friend, "when is the launch?", mention=True)
        await platform.settled()
        [answer] = driver.fake.bot_messages(place.chat_id)
        driver.fake.message(driver.friend, "what time?", group=True, quote=answer)
        await platform.settled()
        answers = driver.fake.bot_messages(place.chat_id)
        typing = list(driver.fake.typing)
    assert answer.quote == (int(asked.message_id.split(":")[0]), driver.friend)
    assert seen(answer).bold == ("Friday",)
    assert [seen(message).text for message in answers] == ["It is Friday.", "At noon."]
    assert place.chat_id in typing


@asynccontextmanager
async def running_on(
    driver: SignalDriver,
    section: dict[str, Any],
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
) -> AsyncIterator[Running]:
    """The gateway on a fake already serving with ``section`` (``harness.running`` serves its own)."""
    config = make_config(emulator_url, "anthropic", gateway=gateway_settings(driver), signal=section)
    async with open_gateway(config, home, environ=driver.environ()) as gateway:
        yield Running(gateway, driver, emulator)


async def test_a_file_signal_cli_no_longer_has_is_reported_gone_not_retried() -> None:
    driver = SignalDriver()
    async with driver.serving() as section:
        adapter = SignalAdapter(BOT, SignalSettings(**section))
        await adapter.start(no_sink, receive=False)
        try:
            with pytest.raises(DeliveryError) as refused:
                await adapter.download(Attachment("document", "att404", "notes.txt"), 1_000_000)
        finally:
            await adapter.stop()
    assert refused.value.permanent and not refused.value.retryable


async def no_sink(batch: Sequence[InboundMessage]) -> None:
    raise AssertionError("nothing is received here")
