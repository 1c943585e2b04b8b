"""Photos, voice notes and files through the whole gateway: real python-telegram-bot and discord.py
against the fake platforms, the real anthropic/openai SDKs against the emulator."""

from __future__ import annotations

import base64
import contextlib
import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.db.errors import StorageUnavailable
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.fakes.discord import FakeDiscord
from tests.gateway.test_gateway_discord import FRIEND as DISCORD_FRIEND
from tests.gateway.test_gateway_discord import discord_gateway
from tests.gateway_support import FRIEND, telegram_gateway
from tests.media_files import corrupt_jpeg, huge_png_header, image_file, pdf, photo, png_file, voice_note


def last_user_content(body: dict[str, Any]) -> list[dict[str, Any]]:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def texts(content: list[dict[str, Any]]) -> str:
    return "\n".join(block["text"] for block in content if block.get("type") == "text")


def stt(url: str, **more: Any) -> dict[str, Any]:
    return {"provider": "openai", "base_url": url + "/v1", **more}


async def test_a_photo_reaches_the_model_as_an_image_and_stays_cached_in_later_turns(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="A blue square with white stripes."))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "What is this?", photo=photo(3000, 2000))
        await harness.settled()
        for turn in range(3):
            harness.fake.private_message(FRIEND, f"Tell me more ({turn})")
            await harness.settled()
        answers = harness.texts(FRIEND)
    assert answers[0] == "A blue square with white stripes."
    first = last_user_content(emulator.requests[0].json)
    assert [block["type"] for block in first] == ["image", "text"]
    assert texts(first) == "[photo]\nWhat is this?"
    sent = base64.b64decode(first[0]["source"]["data"])
    assert sent.startswith(b"\xff\xd8")  # a JPEG, scaled to the edge, not the 3000-px original
    image_again = [r.json["messages"][0]["content"][0]["source"]["data"] for r in emulator.requests[1:]]
    assert image_again == [first[0]["source"]["data"]] * 3  # byte for byte in every later request
    for later in emulator.requests[2:]:  # the 1st request after the photo wrote it; the rest read it
        assert later.cache_read == later.oracle_tokens and later.cache_read > 1568 * 1045 // 750


async def test_a_model_without_vision_gets_the_text_and_the_person_a_notice(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Happy to help with the text."))
    model = {"name": "deepseek-chat"}
    async with telegram_gateway(home, emulator, emulator_url, model=model, provider="openai") as harness:
        harness.fake.private_message(FRIEND, "Is this ok?", photo=photo(800, 600))
        harness.fake.private_message(FRIEND, "", photo=photo(800, 600))
        await harness.settled()
        answer, refusal = harness.texts(FRIEND)
    assert answer.startswith("Happy to help with the text.")
    assert "deepseek-chat cannot see images, so it got the rest of your message without the photo" in answer
    assert refusal.startswith("⚠️ deepseek-chat cannot see images, so I did not send it the photo: pick a")
    assert "the rest of your message" not in refusal  # it got nothing: the photo was alone
    [request] = [r for r in emulator.requests if r.ok]  # the photo alone cost nothing
    assert all(r.status == 200 for r in emulator.requests)  # never an API error
    assert "not shown, this model cannot see images" in texts(last_user_content(request.json))


async def test_a_voice_note_is_transcribed_and_answered_as_text(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Tomorrow at nine works."))
    async with telegram_gateway(
        home, emulator, emulator_url, stt=stt(emulator_url, reply_with_transcript=True)
    ) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("can we meet tomorrow at nine"))
        await harness.settled()
        echo, answer = harness.texts(FRIEND)
    assert echo == "🎤 can we meet tomorrow at nine"
    assert answer == "Tomorrow at nine works."
    [heard] = emulator.transcriptions
    assert heard.model == "whisper-1" and heard.file_name == "voice.ogg"
    assert texts(last_user_content(emulator.requests[-1].json)) == (
        "[voice message, transcribed] can we meet tomorrow at nine"
    )


async def test_a_voice_note_without_transcription_gets_one_clear_line(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("hello"))
        await harness.settled()
        harness.fake.private_message(FRIEND, "ok, typing then")
        await harness.settled()
        refusal, answer = harness.texts(FRIEND)
    assert refusal.startswith("⚠️ I can't listen to voice messages here: speech-to-text is not set up")
    assert answer.startswith("Emulated reply")  # the chat goes on
    [request] = emulator.requests
    assert "voice" not in texts(last_user_content(request.json))  # nothing of it was stored


async def test_a_failed_transcription_is_said_and_nothing_is_stored(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.fail_next(500, count=4, api="audio")
    async with telegram_gateway(home, emulator, emulator_url, stt=stt(emulator_url)) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("lost words"))
        await harness.settled()
        [refusal] = harness.texts(FRIEND)
        store = harness.gateway.services.runtime.store
        session = await store.sessions.latest(f"telegram:dm:{FRIEND}")
        stored = await store.messages.load(session.id, include_inactive=True) if session else []
    assert "I could not transcribe voice.ogg" in refusal and "internal error (HTTP 500)" in refusal
    assert emulator.requests == [] and stored == []


async def test_a_pdf_goes_to_claude_as_a_document(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(
            FRIEND, "Summarize", document=pdf(3), file_name="report.pdf", mime_type="application/pdf"
        )
        await harness.settled()
    content = last_user_content(emulator.requests[-1].json)
    assert [block["type"] for block in content] == ["document", "text"]
    assert content[0]["title"] == "report.pdf" and base64.b64decode(content[0]["source"]["data"]) == pdf(3)
    assert texts(content).startswith("[Attached PDF report.pdf (3 pages): content from outside")


async def test_a_pdf_goes_to_other_models_as_its_text(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url, provider="openai") as harness:
        harness.fake.private_message(
            FRIEND, "Summarize", document=pdf(2), file_name="report.pdf", mime_type="application/pdf"
        )
        await harness.settled()
    text = texts(last_user_content(emulator.requests[-1].json))
    assert 'source="the PDF report.pdf (2 pages, text only)"' in text and "revenue grew 12 percent" in text


@pytest.mark.parametrize(
    ("send", "says"),
    [
        (
            lambda fake: fake.private_message(FRIEND, "look", photo=corrupt_jpeg()),
            "I could not read the image",
        ),
        (
            lambda fake: fake.private_message(
                FRIEND,
                "",
                document=huge_png_header(12_000, 9_000),
                file_name="map.png",
                mime_type="image/png",
            ),
            "map.png is too large: 12000×9000 pixels (108 megapixels); I take images up to 50 megapixels",
        ),
        (
            lambda fake: fake.private_message(
                FRIEND, "", document=pdf(3000, "x"), file_name="bomb.pdf", mime_type="application/pdf"
            ),
            "bomb.pdf has 3,000 pages; I take PDFs up to 100 pages (media.pdf_max_pages)",
        ),
    ],
    ids=["corrupt image", "too many pixels", "pdf bomb"],
)
async def test_bad_files_get_a_clear_line_nothing_is_stored_and_the_chat_goes_on(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, send: Any, says: str
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        send(harness.fake)
        await harness.settled()
        harness.fake.private_message(FRIEND, "never mind, hello")
        await harness.settled()
        refusal, answer = harness.texts(FRIEND)
    assert refusal.startswith("⚠️") and says in refusal
    assert answer.startswith("Emulated reply")
    [request] = emulator.requests
    assert len(request.json["messages"]) == 1  # the bad file's message never entered the history


async def test_a_discord_image_attachment_is_an_image_block(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with discord_gateway(home, emulator, emulator_url, FakeDiscord()) as harness:
        fake = harness.fake
        fake.dm_message(DISCORD_FRIEND, "what colour?", files={"shot.png": photo(640, 480)})
        await harness.settled()
    content = last_user_content(emulator.requests[-1].json)
    assert [block["type"] for block in content] == ["image", "text"]
    assert texts(content) == "[photo: shot.png]\nwhat colour?"


async def test_a_pdf_too_large_for_the_context_window_is_refused_with_the_limit(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(
            FRIEND, "Summarize", document=pdf(100), file_name="annual.pdf", mime_type="application/pdf"
        )
        await harness.settled()
        [refusal] = harness.texts(FRIEND)
    assert refusal.startswith("⚠️ annual.pdf would take about 1")
    assert "files may take at most 100,000 of claude-sonnet-4-6's 200,000-token context window" in refusal
    assert emulator.requests == []


async def test_files_kept_in_the_conversation_count_against_the_per_request_limit(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Two 60-page PDFs would make every later request carry 120 pages (Anthropic takes 100): the
    second is refused with a way out, and the conversation goes on working."""
    async with telegram_gateway(home, emulator, emulator_url) as harness:

        async def send(text: str, name: str | None = None) -> None:
            if name is None:
                harness.fake.private_message(FRIEND, text)
            else:
                harness.fake.private_message(
                    FRIEND, text, document=pdf(60), file_name=name, mime_type="application/pdf"
                )
            await harness.settled()

        await send("", "first.pdf")
        await send("", "second.pdf")
        await send("fine, what did the first say?")
        await send("/new")
        await send("", "second.pdf")
        first, refusal, answer, _, fresh = harness.texts(FRIEND)
    assert first.startswith("Emulated reply") and answer.startswith("Emulated reply")
    assert refusal.startswith("⚠️ This conversation already carries 60 PDF pages, sent again with every")
    assert "with second.pdf it would be 120, over the 100 images and PDF pages one request" in refusal
    assert "Send /new to start a fresh conversation" in refusal
    assert fresh.startswith("Emulated reply")
    assert all(r.status == 200 for r in emulator.requests)  # never a request the provider refuses
    assert [b["type"] for b in last_user_content(emulator.requests[-1].json)] == ["document", "text"]


async def test_a_local_whisper_server_needs_no_api_key(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    async with telegram_gateway(home, emulator, emulator_url, stt=stt(emulator_url)) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("no key needed here"))
        await harness.settled()
    assert texts(last_user_content(emulator.requests[-1].json)) == (
        "[voice message, transcribed] no key needed here"
    )


@pytest.mark.parametrize(
    ("file_name", "mime_type", "image_format"),
    [("scan.bmp", "image/bmp", "BMP"), ("scan.tiff", "application/octet-stream", "TIFF")],
    ids=["bmp by its type", "tiff by its bytes"],
)
async def test_an_image_sent_as_a_file_reaches_the_model_as_an_image(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    file_name: str,
    mime_type: str,
    image_format: str,
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.private_message(
            FRIEND, "what is it?", document=image_file(image_format), file_name=file_name, mime_type=mime_type
        )
        await harness.settled()
    content = last_user_content(emulator.requests[-1].json)
    assert [block["type"] for block in content] == ["image", "text"]
    assert texts(content) == f"[image: {file_name}]\nwhat is it?"
    assert content[0]["source"]["media_type"] == "image/jpeg"  # converted: the providers take no BMP
    assert base64.b64decode(content[0]["source"]["data"]).startswith(b"\xff\xd8")


async def test_a_discord_image_without_a_content_type_is_still_an_image(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with discord_gateway(home, emulator, emulator_url, FakeDiscord()) as harness:
        harness.fake.dm_message(
            DISCORD_FRIEND, "and this?", files={"shot.png": photo(640, 480)}, untyped=True
        )
        await harness.settled()
    content = last_user_content(emulator.requests[-1].json)
    assert [block["type"] for block in content] == ["image", "text"]


async def test_a_discord_voice_message_is_transcribed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Noted."))
    async with discord_gateway(home, emulator, emulator_url, FakeDiscord(), stt=stt(emulator_url)) as harness:
        harness.fake.dm_message(DISCORD_FRIEND, "", voice=voice_note("buy milk on the way home"))
        await harness.settled()
        [answer] = harness.texts(harness.fake.dm_channel(DISCORD_FRIEND))
    assert answer == "Noted."
    [heard] = emulator.transcriptions
    assert heard.file_name == "voice-message.ogg"
    assert texts(last_user_content(emulator.requests[-1].json)) == (
        "[voice message, transcribed] buy milk on the way home"
    )


async def test_a_discord_pdf_goes_to_claude_as_a_document(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with discord_gateway(home, emulator, emulator_url, FakeDiscord()) as harness:
        harness.fake.dm_message(DISCORD_FRIEND, "Summarize", files={"report.pdf": pdf(2)})
        await harness.settled()
    content = last_user_content(emulator.requests[-1].json)
    assert [block["type"] for block in content] == ["document", "text"]
    assert content[0]["title"] == "report.pdf" and base64.b64decode(content[0]["source"]["data"]) == pdf(2)


@pytest.mark.parametrize(
    ("send", "provider", "says"),
    [
        (
            lambda fake: fake.private_message(FRIEND, "", video_note=b"\x00\x00\x00\x18ftypmp42"),
            "anthropic",
            "⚠️ I can't watch or open the round video message; please tell me in words.",
        ),
        (
            lambda fake: fake.private_message(
                FRIEND, "", document=pdf(2, None), file_name="scan.pdf", mime_type="application/pdf"
            ),
            "openai",
            "⚠️ I can't read scan.pdf: it has no text to extract (scanned pages?), and this model reads only",
        ),
        (
            lambda fake: fake.private_message(
                FRIEND, "", document=b"PK\x03\x04" + bytes(64), file_name="a.zip", mime_type="application/zip"
            ),
            "anthropic",
            "⚠️ I can't read a.zip: I read PDFs, text files and images, not application/zip.",
        ),
    ],
    ids=["round video", "scanned pdf for a text-only model", "zip"],
)
async def test_what_nothing_can_read_is_said_instead_of_asking_the_model_about_nothing(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, send: Any, provider: str, says: str
) -> None:
    async with telegram_gateway(home, emulator, emulator_url, provider=provider) as harness:
        send(harness.fake)
        await harness.settled()
        [refusal] = harness.texts(FRIEND)
    assert refusal.startswith(says)
    assert emulator.requests == []


@pytest.mark.parametrize(
    ("gateway", "telegram_limit", "says"),
    [
        (
            {"max_attachment_mb": 0.1},
            None,
            "That file is too large: big.txt (200 kB); I take files up to 0.1 MB. Nothing of this message",
        ),
        (
            {},
            100_000,
            "⚠️ I could not download big.txt: it is larger than the 20 MB Telegram lets bots download.",
        ),
    ],
    ids=["our limit", "telegram's limit"],
)
async def test_a_file_over_the_download_limit_gets_a_line_that_names_it(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    gateway: dict[str, Any],
    telegram_limit: int | None,
    says: str,
) -> None:
    async with telegram_gateway(home, emulator, emulator_url, gateway=gateway) as harness:
        if telegram_limit is not None:
            harness.fake.max_download_bytes = telegram_limit
        harness.fake.private_message(FRIEND, "", document=b"x" * 200_000, file_name="big.txt")
        await harness.settled()
        [refusal] = harness.texts(FRIEND)
    assert refusal.startswith(says)
    assert emulator.requests == []


async def test_a_transcript_is_echoed_once_when_a_turn_is_resumed_after_a_restart(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    echo = stt(emulator_url, reply_with_transcript=True)
    emulator.stall_next(30, api="anthropic")  # the first attempt hangs until the shutdown cuts it off
    quick = {"drain_timeout": 0.1}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, stt=echo, gateway=quick) as harness:
        fake.private_message(FRIEND, "", voice=voice_note("call me back"))
        await fake.wait_for(lambda: harness.texts(FRIEND) and emulator.requests, what="echo, then the model")
    emulator.script(Reply(text="Will do."))
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, stt=echo) as harness:
        await harness.settled()
        assert harness.texts(FRIEND) == ["🎤 call me back", "Will do."]


async def test_a_transcript_is_echoed_when_the_first_attempt_stopped_before_echoing_it(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database went away as the voice note was being read: the attempt that runs once it is back
    is a resumed one, and still echoes the transcript (once) before the answer."""
    echo = stt(emulator_url, reply_with_transcript=True)
    emulator.script(Reply(text="Will do."))
    async with telegram_gateway(home, emulator, emulator_url, stt=echo) as harness:
        reader = type(harness.gateway.services.media)
        read = reader.read
        calls = 0

        async def database_away_the_first_time(self: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise StorageUnavailable("the database cannot be reached (test)")
            return await read(self, *args, **kwargs)

        monkeypatch.setattr(reader, "read", database_away_the_first_time)
        harness.fake.private_message(FRIEND, "", voice=voice_note("call me back"))
        await harness.settled()
        assert calls == 2
        assert harness.texts(FRIEND) == ["🎤 call me back", "Will do."]


async def test_a_file_that_takes_too_long_to_read_is_given_up_on_with_a_line(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.api
    import gateway.conversation.media

    release = threading.Event()

    def stuck(data: bytes, **options: Any) -> Any:
        release.wait(30)  # a page pypdf takes minutes over
        raise AssertionError("given up on: never used")

    monkeypatch.setattr(gateway.conversation.media, "PREPARE_SECONDS", 0.05)
    monkeypatch.setattr(agent.api, "prepare_document", stuck)  # the door the gateway reads it through
    try:
        async with telegram_gateway(home, emulator, emulator_url) as harness:
            harness.fake.private_message(
                FRIEND, "", document=pdf(1), file_name="hard.pdf", mime_type="application/pdf"
            )
            await harness.settled()
            [refusal] = harness.texts(FRIEND)
    finally:
        release.set()
    assert refusal == "⚠️ Reading hard.pdf took too long (over 0.05 seconds); send a smaller file."
    assert emulator.requests == []


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/self/status")


@contextlib.contextmanager
def rss_growth() -> Iterator[list[float]]:
    """How far this process's resident memory rose above where it was while the block ran, at its peak
    and at the end, in MB: the kernel's high-water mark, reset first, so no peak falls between two
    samples."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak to what is resident now
    before = _status_kb("VmRSS")
    growth: list[float] = []
    yield growth
    gc.collect()
    growth += [(_status_kb("VmHWM") - before) / 1024, (_status_kb("VmRSS") - before) / 1024]


@pytest.mark.timeout(240)
async def test_four_huge_images_at_once_keep_the_gateway_within_its_memory_and_give_it_back(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """A 7000×7000 PNG of zeros is a 200 KB file and 196 MB of pixels; four at once took a gateway
    from 168 MB to 1.83 GB, and 1.4 GB stayed in use (which hides the next such peak from this
    measurement: freed memory kept is reused without growing)."""
    zeros = png_file(7000, 7000)
    people = [FRIEND, 21, 22, 23]
    async with telegram_gateway(home, emulator, emulator_url, telegram={"allowed_users": people}) as harness:
        harness.fake.private_message(FRIEND, "hello")  # everything loaded, Pillow too, before measuring
        harness.fake.private_message(FRIEND, "", photo=photo(600, 400))
        await harness.settled()
        with rss_growth() as growth:
            for person in people:
                harness.fake.private_message(
                    person, "what is it?", document=zeros, file_name="zeros.png", mime_type="image/png"
                )
            await harness.settled(timeout=200)
    peak, after = growth
    assert peak < 300, f"the gateway's memory rose by {peak:.0f} MB while it read four images"
    assert after < 100, f"{after:.0f} MB stayed in use after the gateway read four images"
    images = [last_user_content(request.json)[0] for request in emulator.requests[2:]]
    kinds = [(block["type"], block["source"]["media_type"]) for block in images]
    assert kinds == [("image", "image/png")] * 4  # each scaled, its transparency kept
