"""Spoken replies through the whole gateway: a voice note in, a voice note out, on the fake Telegram and
the fake Discord (real python-telegram-bot and discord.py), the speech made by the emulator's
``/v1/audio/speech`` through the real openai SDK, and the OGG/Opus that was sent decoded with PyAV."""

from __future__ import annotations

import base64
import io
import itertools
import logging
import signal
from dataclasses import dataclass
from typing import Any

import av
import pytest

from gateway.config import set_value
from gateway.home import HeraldHome
from gateway.speech.spoken import CODE_LINE
from tests.emulator import ProviderEmulator, Reply
from tests.emulator.speech import EDGE_PATH
from tests.fakes import FakeTelegram
from tests.fakes.discord import FakeDiscord
from tests.gateway.test_gateway_crash import CHAT, configure, gateway_process
from tests.gateway.test_gateway_discord import FRIEND as DISCORD_FRIEND
from tests.gateway.test_gateway_discord import discord_gateway
from tests.gateway_support import FRIEND, telegram_gateway
from tests.media_files import voice_note

pytestmark = pytest.mark.timeout(90)

IS_VOICE_MESSAGE = 1 << 13
OPUS_FRAME = 0.02  # Opus codes 20 ms frames: the encoded length rounds up to them


@dataclass(frozen=True)
class Decoded:
    container: str
    codec: str
    channels: int
    sample_rate: int
    seconds: float


def decode(data: bytes) -> Decoded:
    """What a player finds in ``data``: the container, the codec and the sound's length, counted from
    the decoded samples."""
    with av.open(io.BytesIO(data), mode="r") as container:
        [stream] = container.streams.audio
        samples = sum(frame.samples for frame in container.decode(stream))
        return Decoded(
            container.format.name,
            stream.codec_context.name,
            stream.codec_context.channels,
            stream.codec_context.sample_rate,
            samples / stream.codec_context.sample_rate,
        )


def speech(url: str, **more: Any) -> dict[str, Any]:
    return {"provider": "openai", "base_url": url + "/v1", **more}


def stt(url: str) -> dict[str, Any]:
    return {"provider": "openai", "base_url": url + "/v1"}


def telegram_voice(fake: FakeTelegram, message: Any) -> bytes:
    return fake.file_content(message.media["voice"]["file_id"])


async def test_a_voice_note_is_answered_with_a_voice_note_on_telegram(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Tomorrow at **nine** works for me."), Reply(text="Typed back."))
    async with telegram_gateway(
        home, emulator, emulator_url, stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        fake = harness.fake
        fake.private_message(FRIEND, "", voice=voice_note("can we meet tomorrow at nine"))
        await harness.settled()
        fake.private_message(FRIEND, "and typed?")
        await harness.settled()
        [spoken, typed] = harness.visible(FRIEND)
        usage = await harness.gateway.services.runtime.store.usage.by_purpose()
    [asked] = emulator.speeches
    assert (asked.model, asked.voice, asked.response_format) == ("tts-1", "alloy", "mp3")
    assert asked.input == "Tomorrow at nine works for me."  # the Markdown is not read out
    assert spoken.kind == "voice" and spoken.reply_to_message_id == 1 and spoken.text == ""
    heard = decode(telegram_voice(fake, spoken))
    assert (heard.container, heard.codec, heard.channels, heard.sample_rate) == ("ogg", "opus", 1, 48000)
    assert asked.seconds <= heard.seconds <= asked.seconds + OPUS_FRAME
    assert spoken.media["voice"]["duration"] == round(asked.seconds)
    assert (typed.kind, typed.text) == ("text", "Typed back.")  # voice_in: a typed message gets text
    [billed] = [purpose for purpose in usage if purpose.purpose == "speech"]
    characters = len(asked.input)
    assert (billed.requests, billed.characters) == (1, characters)
    assert billed.cost == pytest.approx(characters * 15 / 1_000_000)


async def test_a_discord_voice_message_is_answered_with_a_voice_message(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Milk it is. I will remind you on the way home."))
    async with discord_gateway(
        home, emulator, emulator_url, FakeDiscord(), stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        harness.fake.dm_message(DISCORD_FRIEND, "", voice=voice_note("buy milk on the way home"))
        await harness.settled()
        [spoken] = harness.fake.messages(harness.fake.dm_channel(DISCORD_FRIEND))
    [asked] = emulator.speeches
    assert spoken.flags & IS_VOICE_MESSAGE and spoken.content == "" and spoken.reply_to is not None
    [attachment] = spoken.attachments
    assert attachment.voice and attachment.filename == "voice-message.ogg"
    heard = decode(attachment.data)
    assert (heard.container, heard.codec, heard.channels) == ("ogg", "opus", 1)
    assert asked.seconds <= heard.seconds <= asked.seconds + OPUS_FRAME
    assert attachment.duration == pytest.approx(heard.seconds, abs=0.01)
    outline = base64.b64decode(attachment.waveform)
    assert len(outline) == round(asked.seconds * 10) and max(outline) == 255 and min(outline) < 128


async def test_always_speaks_every_answer_and_never_streams_it(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="First answer, spoken."), Reply(text="Second answer, spoken too."))
    always = speech(emulator_url, mode="always")
    async with telegram_gateway(home, emulator, emulator_url, tts=always) as harness:
        for question in ("one?", "two?"):
            harness.fake.private_message(FRIEND, question)
            await harness.settled()
        answers = harness.fake.messages(FRIEND)
        sends = [call.method for call in harness.fake.calls if call.method.startswith(("send", "edit"))]
    assert [answer.kind for answer in answers] == ["voice", "voice"]
    assert [s.input for s in emulator.speeches] == ["First answer, spoken.", "Second answer, spoken too."]
    assert "editMessageText" not in sends and "sendMessage" not in sends  # nothing was streamed
    for answer, asked in zip(answers, emulator.speeches, strict=True):
        heard = decode(telegram_voice(harness.fake, answer))
        assert heard.codec == "opus" and asked.seconds <= heard.seconds <= asked.seconds + OPUS_FRAME


CODE_ANSWER = (
    "Here is the script you asked for. It prints the disk usage of every mounted file system.\n\n"
    "```bash\ndf -h | sort -k5 -r\n```\n\nRun it as any user; it needs no root."
)


async def test_an_answer_with_code_comes_as_its_voice_and_its_text(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text=CODE_ANSWER))
    async with telegram_gateway(
        home, emulator, emulator_url, stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("how do I see the disk usage"))
        await harness.settled()
        spoken, written = harness.visible(FRIEND)
    [asked] = emulator.speeches
    assert asked.input == (
        "Here is the script you asked for. It prints the disk usage of every mounted file system.\n"
        f"{CODE_LINE}\nRun it as any user; it needs no root."
    )
    assert "df -h" not in asked.input
    assert spoken.kind == "voice" and spoken.reply_to_message_id == 1
    assert written.kind == "text" and "df -h | sort -k5 -r" in written.text
    assert written.reply_to_message_id is None  # it follows the voice note, which is the reply
    assert decode(telegram_voice(harness.fake, spoken)).codec == "opus"


async def test_a_long_answer_is_spoken_up_to_a_sentence_and_written_in_full(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    long = " ".join(f"Point {n} is worth saying out loud." for n in range(120))  # ~4,000 characters
    emulator.script(Reply(text=long))
    async with telegram_gateway(
        home, emulator, emulator_url, tts=speech(emulator_url, mode="always", max_chars=500)
    ) as harness:
        harness.fake.private_message(FRIEND, "tell me everything")
        await harness.settled()
        spoken, *written = harness.visible(FRIEND)
    [asked] = emulator.speeches
    assert len(asked.input) <= 500 and asked.input.endswith("loud.\nThe rest is in the message.")
    assert spoken.kind == "voice"
    assert " ".join(part.text for part in written).split() == long.split()


async def test_a_failed_synthesis_sends_the_text_and_says_so_in_one_log_line(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.script(Reply(text="Tomorrow at nine works."))
    emulator.fail_next(500, count=10, api="speech")
    caplog.set_level(logging.INFO)
    async with telegram_gateway(
        home, emulator, emulator_url, stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("can we meet tomorrow"))
        await harness.settled()
        [answer] = harness.visible(FRIEND)
        usage = await harness.gateway.services.runtime.store.usage.by_purpose()
    assert (answer.kind, answer.text) == ("text", "Tomorrow at nine works.")
    assert len(emulator.speeches) == 3  # the first try and two retries
    said = [r for r in caplog.records if r.name.startswith("gateway.speech") and r.levelno >= logging.WARNING]
    lines = [record.getMessage() for record in said]
    assert len(lines) == 1 and "no voice note" in lines[0] and "sending the text" in lines[0]
    assert "speech" not in {purpose.purpose for purpose in usage}  # nothing delivered, nothing billed


async def test_a_rate_limited_voice_note_waits_and_goes_out_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    fake.fail_next("sendVoice", 429, retry_after=1, count=3)  # more than python-telegram-bot waits out
    emulator.script(Reply(text="Sure."))
    async with telegram_gateway(
        home, emulator, emulator_url, fake=fake, stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        fake.private_message(FRIEND, "", voice=voice_note("ok?"))
        await harness.settled()
        [answer] = harness.visible(FRIEND)
    calls = fake.calls_to("sendVoice")
    assert [call.status for call in calls] == [429, 429, 429, 200]
    waits = [later.time - earlier.time for earlier, later in itertools.pairwise(calls)]
    assert all(wait >= 1.0 for wait in waits)  # every retry_after honoured
    assert answer.kind == "voice" and len(emulator.speeches) == 1  # sent once, made once


async def test_a_voice_note_telegram_refuses_becomes_its_words(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    fake.fail_next("sendVoice", 400, description="Bad Request: VOICE_MESSAGES_FORBIDDEN")
    emulator.script(Reply(text="Short and **sweet**."))
    async with telegram_gateway(
        home, emulator, emulator_url, fake=fake, stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        fake.private_message(FRIEND, "", voice=voice_note("hello"))
        await harness.settled()
        [answer] = harness.visible(FRIEND)
    assert (answer.kind, answer.text, answer.reply_to_message_id) == ("text", "Short and sweet.", 1)
    assert [entity["type"] for entity in answer.entities] == ["bold"]


async def test_a_discord_channel_without_voice_messages_gets_an_audio_file(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeDiscord()
    fake.voice_messages_denied.add(fake.dm_channel(DISCORD_FRIEND))
    emulator.script(Reply(text="Done."))
    async with discord_gateway(
        home, emulator, emulator_url, fake, stt=stt(emulator_url), tts=speech(emulator_url)
    ) as harness:
        fake.dm_message(DISCORD_FRIEND, "", voice=voice_note("hello"))
        await harness.settled()
        [answer] = fake.messages(fake.dm_channel(DISCORD_FRIEND))
    [attachment] = answer.attachments
    assert not answer.flags & IS_VOICE_MESSAGE and not attachment.voice
    assert attachment.filename == "answer.ogg" and decode(attachment.data).codec == "opus"


@pytest.mark.timeout(180)  # two gateway processes start, as in test_gateway_crash
def test_a_voice_note_queued_before_a_crash_is_sent_once_after_the_restart(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    """SIGKILL while the voice note waits in the outbox (Telegram answered 500): the restarted gateway
    sends the stored bytes, once, and makes no new one."""
    fake = FakeTelegram()
    fake.fail_next("sendVoice", 500, count=1000)  # the first process never gets it out
    emulator.script(Reply(text="Noted, I will call you back after lunch."), Reply(text="Typed back."))
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        for key, value in (
            ("stt.provider", "openai"),
            ("stt.base_url", provider + "/v1"),
            ("tts.provider", "openai"),
            ("tts.base_url", provider + "/v1"),
        ):
            set_value(home.config_path, key, value)
        with gateway_process(home, fake) as first:
            fake.private_message(CHAT, "", voice=voice_note("call me back"))
            fake.wait_for_sync(lambda: fake.calls_to("sendVoice"), timeout=60, what="a try at the voice note")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with fake.lock:
            fake.faults.clear()
        with gateway_process(home, fake):
            fake.wait_for_sync(lambda: voices(fake), timeout=60, what="the voice note after the restart")
            # A later message, answered: the chat's replies go out in order, so a second copy of the
            # voice note (or a note made again) would have come before its answer.
            fake.private_message(CHAT, "thanks")
            fake.wait_for_sync(lambda: len(fake.messages(CHAT)) >= 2, timeout=60, what="the later answer")
            sent = voices(fake)
    assert len(sent) == 1 and [m.text for m in fake.messages(CHAT)][1:] == ["Typed back."]
    assert [m.kind for m in fake.messages(CHAT)] == ["voice", "text"]
    [made] = emulator.speeches  # the restart sent what was stored: nothing was made again
    assert made.seconds <= decode(telegram_voice(fake, sent[0])).seconds <= made.seconds + OPUS_FRAME


def voices(fake: FakeTelegram) -> list[Any]:
    return [message for message in fake.messages(CHAT) if message.kind == "voice"]


async def test_a_voice_note_over_the_chats_spend_limit_is_not_made_and_the_text_goes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    """Speech counts against the spend limits like the turn's model requests: priced here at $1 a
    character, the voice note does not fit the chat's $1 a day, so it is never asked for."""
    emulator.script(Reply(text="A short answer."))
    caplog.set_level(logging.INFO)
    dear = speech(emulator_url, price_per_million_chars=1_000_000.0)
    async with telegram_gateway(
        home, emulator, emulator_url, stt=stt(emulator_url), tts=dear, budgets={"chat": {"daily_usd": 1.0}}
    ) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("hello"))
        await harness.settled()
        [answer] = harness.visible(FRIEND)
    assert (answer.kind, answer.text) == ("text", "A short answer.")  # the turn itself fitted
    assert emulator.speeches == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "gateway.speech.replies"]
    assert "no voice note (a request needing at least $" in line  # the voice note's price, not what was spent
    assert "would cross the spend limit of chat:telegram:dm:2 ($1.00 per day)" in line


async def test_edge_voices_speak_through_edge_tts(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tts.provider: edge, through the real edge-tts library, its websocket pointed at the emulator's
    stand-in for Microsoft's service: free, keyless, recorded with its characters at no cost."""
    import edge_tts.communicate

    address = emulator_url.replace("http://", "ws://") + EDGE_PATH + "?TrustedClientToken=emulated"
    monkeypatch.setattr(edge_tts.communicate, "WSS_URL", address)
    emulator.script(Reply(text="Good morning! It's sunny & 20 °C."))
    edge = {"provider": "edge", "mode": "always", "voice": "de-DE-KatjaNeural"}
    async with telegram_gateway(home, emulator, emulator_url, tts=edge) as harness:
        harness.fake.private_message(FRIEND, "weather?")
        await harness.settled()
        [spoken] = harness.visible(FRIEND)
        usage = await harness.gateway.services.runtime.store.usage.by_purpose()
    [asked] = emulator.edge_speeches
    assert asked.voice == "Microsoft Server Speech Text to Speech Voice (de-DE, KatjaNeural)"
    assert asked.input == "Good morning! It's sunny & 20 °C."  # escaped for the SSML, and back
    assert spoken.kind == "voice"
    heard = decode(telegram_voice(harness.fake, spoken))
    assert heard.codec == "opus" and asked.seconds <= heard.seconds <= asked.seconds + OPUS_FRAME
    [billed] = [purpose for purpose in usage if purpose.purpose == "speech"]
    assert (billed.characters, billed.cost) == (len(asked.input), 0.0)
