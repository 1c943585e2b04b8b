"""The Telegram adapter, through the real python-telegram-bot against the fake Bot API server.

Pure conversion and error-mapping tests build PTB objects from dicts; everything else runs a real
``TelegramAdapter`` (its own ``getUpdates`` loop, ``ExtBot`` + rate limiter) against
``FakeTelegram`` on loopback and asserts on what the sink received and what the fake recorded.
The reliability contract (store before confirm) is checked on the fake's pending updates.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import logging
import re
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from httpcore._async.http11 import AsyncHTTP11Connection
from telegram import Bot, Message
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from adapters.base import (
    Attachment,
    ChatAddress,
    ChatType,
    CommandSpec,
    DeliveryError,
    InboundMessage,
    OutboundText,
    TextEntity,
)
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.errors import delivery_error, retry_after_seconds
from adapters.telegram.inbound import BotIdentity, display_name, to_inbound
from adapters.telegram.redaction import TokenFilter, describe
from adapters.telegram.webhook import SECRET_HEADER, webhook_secret
from tests.fakes import FakeTelegram
from tests.fakes.telegram.formatting import detect_entities
from tests.fakes.waiting import WAIT_TIMEOUT as WAIT

ME = BotIdentity(123456, "herald_bot")
PRIVATE = 42
GROUP = -1001234567890
FORUM = -1009876543210
FAST: dict[str, Any] = {"poll_timeout": 0.5, "retry_base": 0.05, "retry_cap": 0.2}


@pytest.fixture(autouse=True)
def _timedelta_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """PTB 22 warns on every RetryAfter unless opted in; the adapter reads it either way."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


# --- building PTB messages for the pure tests -----------------------------------------------------

ADA = {"id": 7, "is_bot": False, "first_name": "Ada", "last_name": "Lovelace", "username": "ada"}
DM_CHAT = {"id": 7, "type": "private", "first_name": "Ada"}
GROUP_CHAT = {"id": GROUP, "type": "supergroup", "title": "Engine Room"}
FORUM_CHAT = {"id": FORUM, "type": "supergroup", "title": "Forum", "is_forum": True}
BOT_USER = {"id": ME.id, "is_bot": True, "first_name": "Herald", "username": ME.username}


def message(text: str | None = "hello", *, chat: dict[str, Any] = DM_CHAT, **fields: Any) -> Message:
    """A ``Message`` as PTB parses it; a text gets the entities Telegram would detect."""
    data: dict[str, Any] = {"message_id": 10, "date": 1_700_000_000, "chat": chat, "from": ADA, **fields}
    if text is not None:
        data["text"] = text
        data.setdefault("entities", detect_entities(text))
    return Message.de_json(data, None)


def convert(text: str | None = "hello", **fields: Any) -> InboundMessage:
    inbound = to_inbound(message(text, **fields), ME)
    assert inbound is not None
    return inbound


def bot_message(message_id: int, chat: dict[str, Any] = GROUP_CHAT) -> dict[str, Any]:
    return {"message_id": message_id, "date": 1_699_999_999, "chat": chat, "from": BOT_USER, "text": "hi"}


# --- inbound conversion (pure) -------------------------------------------------------------------


def test_a_direct_message_is_addressed() -> None:
    inbound = convert("hello there")
    assert inbound == InboundMessage(
        platform="telegram",
        chat_id="7",
        chat_type=ChatType.DIRECT,
        user_id="7",
        user_name="Ada Lovelace",
        message_id="10",
        text="hello there",
        timestamp=1_700_000_000.0,
        addressed=True,
    )


@pytest.mark.parametrize(
    ("text", "fields", "addressed", "normalized"),
    [
        ("just chatting", {}, False, "just chatting"),
        ("@herald_bot what's up?", {}, True, "@herald_bot what's up?"),
        ("hey @HERALD_BOT", {}, True, "hey @HERALD_BOT"),  # usernames are case-insensitive
        ("hey @herald_bot_fan", {}, False, "hey @herald_bot_fan"),
        ("/help", {}, True, "/help"),
        ("/help@herald_bot  with  args", {}, True, "/help  with  args"),
        ("/Help@Herald_Bot", {}, True, "/Help"),
        ("/help@otherbot", {}, False, "/help@otherbot"),
        ("/help@otherbot @herald_bot", {}, False, "/help@otherbot @herald_bot"),  # aimed elsewhere
        ("see /help@herald_bot", {}, True, "see /help@herald_bot"),  # not leading: a mention, not a command
        ("thanks", {"reply_to_message": bot_message(5)}, True, "thanks"),
        ("thanks", {"reply_to_message": {**bot_message(5), "from": ADA}}, False, "thanks"),
    ],
)
def test_group_addressing_and_command_normalization(
    text: str, fields: dict[str, Any], addressed: bool, normalized: str
) -> None:
    inbound = convert(text, chat=GROUP_CHAT, **fields)
    assert (inbound.chat_type, inbound.chat_title) == (ChatType.GROUP, "Engine Room")
    assert (inbound.addressed, inbound.text) == (addressed, normalized)


def test_text_mention_of_the_bot_and_emoji_offsets() -> None:
    # Entity offsets count UTF-16 units: the emoji before the mention takes two.
    mention = {"type": "text_mention", "offset": 3, "length": 6, "user": BOT_USER}
    assert convert("😀 Herald!", chat=GROUP_CHAT, entities=[mention]).addressed
    other = {**mention, "user": ADA}
    assert not convert("😀 Herald!", chat=GROUP_CHAT, entities=[other]).addressed
    assert convert("😀 @herald_bot", chat=GROUP_CHAT).addressed
    command = convert("/ask@herald_bot 😀 ok", chat=GROUP_CHAT)
    assert command.text == "/ask 😀 ok"


def test_commands_in_direct_chats_are_normalized_too() -> None:
    assert convert("/start@herald_bot").text == "/start"
    assert convert("/start@otherbot").addressed  # a direct chat is always addressed


def test_forum_topics_and_their_root_message() -> None:
    topic_root = {**bot_message(77, FORUM_CHAT), "forum_topic_created": {"name": "Ops", "icon_color": 1}}
    del topic_root["text"]
    inbound = convert(
        "status?",
        chat=FORUM_CHAT,
        message_thread_id=77,
        is_topic_message=True,
        reply_to_message=topic_root,
    )
    # The topic root made by the bot is where the message lives, not a reply to the bot.
    assert (inbound.thread_id, inbound.reply_to_id, inbound.addressed) == ("77", None, False)
    explicit = convert(
        "yes",
        chat=FORUM_CHAT,
        message_thread_id=77,
        is_topic_message=True,
        reply_to_message={**bot_message(80, FORUM_CHAT), "message_thread_id": 77},
    )
    assert (explicit.thread_id, explicit.reply_to_id, explicit.addressed) == ("77", "80", True)
    # Outside forums message_thread_id marks a reply chain, which is no place to send to.
    reply_chain = convert("re", chat=GROUP_CHAT, message_thread_id=5, reply_to_message=bot_message(5))
    assert (reply_chain.thread_id, reply_chain.reply_to_id) == (None, "5")


def test_attachments_and_captions() -> None:
    document = {"file_id": "D1", "file_unique_id": "d", "file_name": "notes.md", "mime_type": "text/markdown"}
    inbound = convert(
        None,
        document={**document, "file_size": 12},
        caption="/sum@herald_bot please",
        caption_entities=detect_entities("/sum@herald_bot please"),
        chat=GROUP_CHAT,
    )
    assert inbound.attachments == (Attachment("document", "D1", "notes.md", "text/markdown", 12),)
    assert (inbound.text, inbound.addressed) == ("/sum please", True)

    sizes = [
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 60, "file_size": 1_000},
        {"file_id": "large", "file_unique_id": "l", "width": 1280, "height": 960, "file_size": 90_000},
        {"file_id": "mid", "file_unique_id": "m", "width": 320, "height": 240, "file_size": 9_000},
    ]
    photo = convert(None, photo=sizes)
    assert photo.text == ""  # an attachment without caption still arrives
    assert photo.attachments == (Attachment("photo", "large", None, "image/jpeg", 90_000),)

    media = {
        "audio": {
            "file_id": "A",
            "file_unique_id": "a",
            "duration": 3,
            "file_name": "a.mp3",
            "mime_type": "audio/mpeg",
        },
        "voice": {
            "file_id": "V",
            "file_unique_id": "v",
            "duration": 2,
            "mime_type": "audio/ogg",
            "file_size": 5,
        },
        "video": {
            "file_id": "M",
            "file_unique_id": "m",
            "duration": 4,
            "width": 2,
            "height": 2,
            "file_name": "m.mp4",
        },
        "sticker": {
            "file_id": "S",
            "file_unique_id": "s",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": "👍",
        },
    }
    kinds = {name: convert(None, **{name: value}).attachments[0] for name, value in media.items()}
    assert kinds["audio"] == Attachment("audio", "A", "a.mp3", "audio/mpeg", None)
    assert kinds["voice"] == Attachment("voice", "V", None, "audio/ogg", 5)
    assert kinds["video"] == Attachment("video", "M", "m.mp4", None, None)
    assert kinds["sticker"] == Attachment("sticker", "S", None, "image/webp", None)


def test_what_carries_nothing_for_the_bot_is_dropped() -> None:
    assert to_inbound(message("beep", chat=GROUP_CHAT, **{"from": {**ADA, "is_bot": True}}), ME) is None
    assert to_inbound(message("echo", chat=GROUP_CHAT, **{"from": BOT_USER}), ME) is None
    joined = message(None, chat=GROUP_CHAT, new_chat_members=[ADA])
    assert to_inbound(joined, ME) is None


def test_what_a_person_sends_without_text_still_arrives() -> None:
    """A person must never get silence: what has words becomes text, the rest an attachment."""
    where = {"latitude": 52.52, "longitude": 13.405}
    said: dict[str, dict[str, Any]] = {
        "location": {"location": where},
        "venue": {"venue": {"location": where, "title": "Cafe", "address": "Main St 1"}, "location": where},
        "contact": {"contact": {"phone_number": "+4912345", "first_name": "Ada", "last_name": "L"}},
        "poll": {
            "poll": {
                "id": "p",
                "question": "Lunch?",
                "options": [
                    {"text": "yes", "voter_count": 0, "persistent_id": "1"},
                    {"text": "no", "voter_count": 0, "persistent_id": "2"},
                ],
                "total_voter_count": 0,
                "is_closed": False,
                "is_anonymous": True,
                "type": "regular",
                "allows_multiple_answers": False,
                "allows_revoting": False,
                "members_only": False,
            }
        },
        "dice": {"dice": {"emoji": "🎲", "value": 4}},
    }
    texts = {kind: convert(None, **fields).text for kind, fields in said.items()}
    assert texts == {
        "location": "[location: 52.52000, 13.40500]",
        "venue": "[place: Cafe, Main St 1 (52.52000, 13.40500)]",
        "contact": "[contact: Ada L, +4912345]",
        "poll": "[poll: Lunch? — yes / no]",
        "dice": "[rolled 🎲: 4]",
    }
    video_note = {"file_id": "R", "file_unique_id": "r", "length": 240, "duration": 5, "file_size": 9}
    gif = {"file_id": "G", "file_unique_id": "g", "width": 2, "height": 2, "duration": 1}
    gif |= {"file_name": "cat.gif.mp4", "mime_type": "video/mp4"}
    story = {"chat": DM_CHAT, "id": 7}
    shown = {
        "video_note": convert(None, video_note=video_note).attachments,
        "animation": convert(None, animation=gif, document=gif).attachments,  # as Telegram sends it
        "story": convert(None, story=story).attachments,
    }
    assert shown == {
        "video_note": (Attachment("video_note", "R", None, "video/mp4", 9),),
        "animation": (Attachment("animation", "G", "cat.gif.mp4", "video/mp4", None),),
        "story": (Attachment("story", ""),),
    }


def test_messages_on_behalf_of_a_chat_are_attributed_to_it() -> None:
    anonymous = {"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}
    inbound = convert("@herald_bot hi", chat=GROUP_CHAT, sender_chat=GROUP_CHAT, **{"from": anonymous})
    assert (inbound.user_id, inbound.user_name, inbound.addressed) == (str(GROUP), "Engine Room", True)
    channel = {"id": -100555, "type": "channel", "title": "News"}
    assert convert("post", chat=channel, sender_chat=channel).chat_type == ChatType.CHANNEL


def test_display_names() -> None:
    def user(**fields: Any) -> Any:
        return Message.de_json(
            {**message().to_dict(), "from": {"id": 9, "is_bot": False, **fields}}, None
        ).from_user

    assert display_name(user(first_name="Ada", last_name="Lovelace")) == "Ada Lovelace"
    assert display_name(user(first_name="  Ada\n\t the\u202e  Great ")) == "Ada the Great"
    assert display_name(user(first_name="\u200b", username="ada")) == "@ada"
    assert display_name(user(first_name="")) == "9"
    assert display_name(user(first_name="👨\u200d👩\u200d👧 family")) == "👨\u200d👩\u200d👧 family"
    assert len(display_name(user(first_name="x" * 200))) == 64


# --- errors, secrets, backoff, redaction (pure) ---------------------------------------------------


@pytest.mark.parametrize(
    ("error", "retryable", "formatting", "permanent"),
    [
        (Forbidden("Forbidden: bot was blocked by the user"), False, False, True),
        (ChatMigrated(-100777), False, False, True),
        (
            BadRequest("Can't parse entities: can't find end of the entity starting at byte offset 0"),
            False,
            True,
            False,
        ),
        (BadRequest("Entity_bounds_invalid"), False, True, False),
        (BadRequest("Chat not found"), False, False, True),
        (BadRequest("Message to edit not found"), False, False, True),
        (BadRequest("Message thread not found"), False, False, True),
        (BadRequest("Message is too long"), False, False, False),
        (TimedOut(), True, False, False),
        (NetworkError("Bad Gateway"), True, False, False),
        (InvalidToken("Unauthorized"), False, False, False),
        (Conflict("terminated by other getUpdates request"), False, False, False),
        (TelegramError("something new"), False, False, False),
    ],
)
def test_error_mapping(error: TelegramError, retryable: bool, formatting: bool, permanent: bool) -> None:
    mapped = delivery_error(error, "sendMessage", "123:SECRET")
    assert (mapped.retryable, mapped.formatting, mapped.permanent) == (retryable, formatting, permanent)
    assert mapped.retry_after is None
    assert str(mapped).startswith("Telegram sendMessage failed: ")


def test_retry_after_is_read_with_and_without_ptb_timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    error = RetryAfter(dtm.timedelta(seconds=3))
    for setting in ("true", "false"):
        monkeypatch.setenv("PTB_TIMEDELTA", setting)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # our read must not leak PTB's deprecation warning
            assert retry_after_seconds(error) == 3.0
            mapped = delivery_error(error, "sendMessage", "t")
        assert (mapped.retryable, mapped.retry_after) == (True, 3.0)


def test_webhook_secret_is_stable_and_allowed_by_telegram() -> None:
    secret = webhook_secret("123:ABC")
    assert secret == webhook_secret("123:ABC") != webhook_secret("123:ABD")
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret) and len(secret) == 64
    assert "ABC" not in secret
    assert TelegramAdapter("123:ABC").webhook_secret == secret


def test_the_token_never_reaches_log_text(caplog: pytest.LogCaptureFixture) -> None:
    token = "123:SECRET"
    assert describe(NetworkError(f"httpx.ConnectError: https://x/bot{token}/getMe"), token) == (
        "NetworkError: httpx.ConnectError: https://x/bot<token>/getMe"
    )
    guard = TokenFilter(token)
    guard.attach()
    try:
        with caplog.at_level(logging.DEBUG):
            logging.getLogger("httpx").info("HTTP Request: POST %s", f"https://api/bot{token}/getMe")
    finally:
        guard.detach()
    assert token not in caplog.text and "bot<token>/getMe" in caplog.text


def test_constructor_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="webhook_url"):
        TelegramAdapter("1:T", mode="webhook")
    with pytest.raises(ValueError, match="mode"):
        TelegramAdapter("1:T", mode="carrier-pigeon")  # type: ignore[arg-type]
    assert TelegramAdapter("1:T").capabilities.max_message_length == 4096


# --- against the fake server ---------------------------------------------------------------------


@dataclass
class Inbox:
    """A sink: records what it stored; ``hook`` runs first and may raise or block.

    Like the gateway's inbox (unique per chat and message id), a message handed over again (an update
    Telegram redelivered because its confirmation never went out) is stored once; ``calls`` sees every
    hand-over."""

    hook: Callable[[InboundMessage], Awaitable[None]] | None = None
    messages: list[InboundMessage] = field(default_factory=list)
    calls: list[InboundMessage] = field(default_factory=list)

    async def __call__(self, batch: Sequence[InboundMessage]) -> None:
        for inbound in batch:  # a batch is stored whole or not at all: the hook may refuse it
            self.calls.append(inbound)
            if self.hook is not None:
                await self.hook(inbound)
        stored = {(m.chat_id, m.message_id) for m in self.messages}
        self.messages.extend(m for m in batch if (m.chat_id, m.message_id) not in stored)

    async def stored(self, fake: FakeTelegram, count: int = 1) -> list[InboundMessage]:
        """Wait until ``count`` messages were stored; returns them."""
        await fake.wait_for(lambda: len(self.messages) >= count, WAIT, what=f"{count} stored message(s)")
        return list(self.messages)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    async with server.serve():
        yield server


@asynccontextmanager
async def running(
    fake: FakeTelegram, sink: Inbox | None = None, **options: Any
) -> AsyncIterator[TelegramAdapter]:
    adapter = TelegramAdapter(
        fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url, **{**FAST, **options}
    )
    await asyncio.wait_for(adapter.start(sink or Inbox()), WAIT)
    try:
        yield adapter
    finally:
        await asyncio.wait_for(adapter.stop(), WAIT)


def at(chat_id: int, thread_id: int | None = None) -> ChatAddress:
    return ChatAddress("telegram", str(chat_id), None if thread_id is None else str(thread_id))


async def test_a_direct_message_reaches_the_sink_and_is_then_confirmed(fake: FakeTelegram) -> None:
    inbox = Inbox()
    async with running(fake, inbox) as adapter:
        assert adapter.status().connected and adapter.status().extra == {
            "bot": "@herald_bot",
            "mode": "polling",
        }
        pushed = fake.private_message(PRIVATE, "hello", first_name="Ada", username="ada")
        (inbound,) = await inbox.stored(fake)
        await fake.wait_for(lambda: fake.pending_updates() == [], WAIT, what="the update confirmed")
    assert (inbound.chat_type, inbound.addressed, inbound.text, inbound.user_name) == (
        ChatType.DIRECT,
        True,
        "hello",
        "Ada",
    )
    assert inbound.message_id == str(pushed["message"]["message_id"])
    assert [c.method for c in fake.calls][:3] == ["getMe", "deleteWebhook", "getUpdates"]
    polls = fake.calls_to("getUpdates")
    assert polls[0].params["allowed_updates"] == ["message", "callback_query"]
    assert {c.params.get("timeout") for c in polls} == {0.5}
    assert not adapter.status().connected


async def test_updates_with_nothing_for_the_bot_are_confirmed_without_the_sink(fake: FakeTelegram) -> None:
    fake.register_chat(GROUP, title="Engine Room")
    joined = {"message_id": 50, "date": 1, "chat": GROUP_CHAT, "from": ADA, "new_chat_members": [ADA]}
    from_bot = {
        "message_id": 51,
        "date": 1,
        "chat": GROUP_CHAT,
        "from": {**ADA, "is_bot": True},
        "text": "beep",
    }
    fake.push_update({"message": joined})
    fake.push_update({"message": from_bot})
    fake.push_update({"edited_message": {**from_bot, "from": ADA, "edit_date": 2}})  # not asked for
    inbox = Inbox()
    async with running(fake, inbox):
        fake.group_message(GROUP, 5, "real one")
        (only,) = await inbox.stored(fake)
        await fake.wait_for(lambda: fake.pending_updates() == [], WAIT)
    assert only.text == "real one" and len(inbox.calls) == 1


async def test_group_addressing_in_order(fake: FakeTelegram) -> None:
    fake.register_chat(GROUP, title="Engine Room")
    inbox = Inbox()
    async with running(fake, inbox) as adapter:
        bot_said = await adapter.send(at(GROUP), OutboundText("I am here"))
        fake.group_message(GROUP, 5, "just chatting")
        fake.group_message(GROUP, 5, "what's up?", mention_bot=True)
        fake.group_message(GROUP, 5, "thanks", reply_to_bot_message_id=int(bot_said))
        fake.group_message(GROUP, 5, "/help@herald_bot now")
        fake.group_message(GROUP, 5, "/help@otherbot")
        got = await inbox.stored(fake, 5)
    assert [(m.text, m.addressed) for m in got] == [
        ("just chatting", False),
        ("@herald_bot what's up?", True),
        ("thanks", True),
        ("/help now", True),
        ("/help@otherbot", False),
    ]
    assert got[2].reply_to_id == bot_said
    assert {m.chat_type for m in got} == {ChatType.GROUP}


async def test_forum_topics_round_trip(fake: FakeTelegram) -> None:
    inbox = Inbox()
    async with running(fake, inbox) as adapter:
        asked = fake.group_message(FORUM, 9, "help", is_forum=True, thread_id=77, mention_bot=True)
        (inbound,) = await inbox.stored(fake)
        address = ChatAddress("telegram", inbound.chat_id, inbound.thread_id)
        await adapter.send(address, OutboundText("on topic"), reply_to=inbound.message_id)
        await adapter.send(at(FORUM), OutboundText("in general"))
    assert (inbound.thread_id, inbound.addressed) == ("77", True)
    (sent,) = fake.messages(FORUM, thread_id=77)
    assert (sent.text, sent.reply_to_message_id) == ("on topic", asked["message"]["message_id"])
    assert [m.thread_id for m in fake.messages(FORUM)] == [77, None]


async def test_document_and_photo_attachments(fake: FakeTelegram) -> None:
    inbox = Inbox()
    async with running(fake, inbox):
        fake.private_message(
            PRIVATE, "see attached", document=b"body", file_name="notes.md", mime_type="text/markdown"
        )
        fake.private_message(PRIVATE, "", photo=b"jpeg bytes")
        document, photo = await inbox.stored(fake, 2)
    assert document.text == "see attached"
    (attached,) = document.attachments
    assert (attached.kind, attached.name, attached.mime_type, attached.size) == (
        "document",
        "notes.md",
        "text/markdown",
        4,
    )
    assert attached.file_id in fake.files
    assert photo.text == "" and [a.kind for a in photo.attachments] == ["photo"]


async def test_a_failing_sink_keeps_the_update_unconfirmed_until_it_succeeds(fake: FakeTelegram) -> None:
    pending_during_calls: list[list[int]] = []

    async def flaky(inbound: InboundMessage) -> None:
        pending_during_calls.append([u["update_id"] for u in fake.pending_updates()])
        if len(pending_during_calls) == 1:
            raise RuntimeError("database is locked")

    inbox = Inbox(hook=flaky)
    async with running(fake, inbox):
        first = fake.private_message(PRIVATE, "store me")
        second = fake.private_message(PRIVATE, "and me after")
        await inbox.stored(fake, 2)
        await fake.wait_for(lambda: fake.pending_updates() == [], WAIT, what="both confirmed")
    uid = first["update_id"]
    assert [m.text for m in inbox.calls] == ["store me", "store me", "and me after"]
    assert inbox.calls[0].message_id == inbox.calls[1].message_id
    assert uid in pending_during_calls[0] and uid in pending_during_calls[1]
    assert second["update_id"] in pending_during_calls[2]  # confirmed only after its own turn


async def test_stopping_during_a_slow_sink_leaves_the_update_for_the_next_process(fake: FakeTelegram) -> None:
    never = asyncio.Event()

    async def slow(inbound: InboundMessage) -> None:
        await never.wait()

    stuck = Inbox(hook=slow)
    async with running(fake, stuck):
        pushed = fake.private_message(PRIVATE, "do not lose me")
        await fake.wait_for(lambda: stuck.calls, WAIT)
    uid = pushed["update_id"]
    assert stuck.messages == []
    assert [u["update_id"] for u in fake.pending_updates()] == [uid]
    assert all((c.params.get("offset") or 0) <= uid for c in fake.calls_to("getUpdates"))

    restarted = Inbox()
    async with running(fake, restarted):
        (again,) = await restarted.stored(fake)
        await fake.wait_for(lambda: fake.pending_updates() == [], WAIT)
    assert again.message_id == str(pushed["message"]["message_id"]) and again.text == "do not lose me"


async def test_send_with_entities_reply_and_no_link_preview(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    text = OutboundText(
        "Bold 😀 and\nprint(1)",
        (TextEntity("bold", 0, 4), TextEntity("pre", 12, 8, language="python")),
    )
    async with running(fake) as adapter:
        first = await adapter.send(at(PRIVATE), text)
        reply = await adapter.send(at(PRIVATE), OutboundText("re"), reply_to=first)
        orphan = await adapter.send(at(PRIVATE), OutboundText("re: gone"), reply_to="999")
    sent = fake.messages(PRIVATE)
    assert [m.message_id for m in sent] == [int(first), int(reply), int(orphan)]
    assert sent[0].entities == [
        {"type": "bold", "offset": 0, "length": 4},
        {"type": "pre", "offset": 12, "length": 8, "language": "python"},
    ]
    assert sent[0].link_preview_options == {"is_disabled": True}
    assert (sent[1].reply_to_message_id, sent[2].reply_to_message_id) == (int(first), None)


async def test_rejected_formatting_is_reported_as_such(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    fake.reject_formatting_next()
    async with running(fake) as adapter:
        with pytest.raises(DeliveryError) as info:
            await adapter.send(at(PRIVATE), OutboundText("bold", (TextEntity("bold", 0, 4),)))
        await adapter.send(at(PRIVATE), OutboundText("bold"))  # the plain-text fallback passes
    assert (info.value.formatting, info.value.retryable, info.value.permanent) == (True, False, False)
    assert [m.text for m in fake.messages(PRIVATE)] == ["bold"]


async def test_edit_not_modified_delete_and_missing_messages(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    async with running(fake) as adapter:
        draft = await adapter.send(at(PRIVATE), OutboundText("draft"))
        final = OutboundText("final", (TextEntity("italic", 0, 5),))
        await adapter.edit(at(PRIVATE), draft, final)
        await adapter.edit(at(PRIVATE), draft, final)  # "message is not modified": success
        with pytest.raises(DeliveryError) as missing:
            await adapter.edit(at(PRIVATE), "999", final)
        (edited,) = fake.messages(PRIVATE)
        await adapter.delete(at(PRIVATE), draft)
        await adapter.delete(at(PRIVATE), draft)  # already gone: success
    assert (edited.text, edited.versions, edited.entities[0]["type"]) == (
        "final",
        ("draft", "final"),
        "italic",
    )
    assert missing.value.permanent and not missing.value.retryable
    assert fake.messages(PRIVATE)[0].deleted
    assert [c.status for c in fake.calls_to("editMessageText")] == [200, 400, 400]
    assert [c.status for c in fake.calls_to("deleteMessage")] == [200, 400]


async def test_typing_is_recorded_and_never_raises(fake: FakeTelegram) -> None:
    fake.register_chat(FORUM, is_forum=True)
    fake.register_chat(PRIVATE)
    fake.forbid_chat(PRIVATE)
    adapter = TelegramAdapter(fake.token, base_url=fake.base_url, **FAST)
    await adapter.typing(at(FORUM, 77))  # not started: nothing happens
    async with running(fake) as adapter:
        await adapter.typing(at(FORUM, 77))
        await adapter.typing(at(PRIVATE))  # blocked: swallowed
        await adapter.typing(at(123))  # unknown chat: swallowed
    assert [(a.action, a.thread_id) for a in fake.typing_actions(FORUM)] == [("typing", 77)]


async def test_a_request_whose_caller_is_cancelled_still_runs_to_its_end(fake: FakeTelegram) -> None:
    """Cancelling an HTTP request mid-flight can lose its pooled connection for good (httpcore); enough
    of those and the bot sends nothing. The caller stops waiting; the request is answered."""
    fake.register_chat(PRIVATE)
    fake.slow_next("sendChatAction", 0.3)
    fake.slow_next("sendMessage", 0.3)
    async with running(fake) as adapter:
        calls = [adapter.typing(at(PRIVATE)), adapter.send(at(PRIVATE), OutboundText("never waited for"))]
        tasks = [asyncio.create_task(call) for call in calls]
        await fake.wait_for(lambda: len(fake.calls_to("sendMessage")) == 1, WAIT)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        assert all(task.cancelled() for task in tasks)  # the callers stopped at once

        def statuses() -> list[int | None]:
            return [c.status for c in fake.calls_to("sendChatAction") + fake.calls_to("sendMessage")]

        await fake.wait_for(lambda: all(statuses()), WAIT)
    assert statuses() == [200, 200]


async def test_a_429_is_waited_out_by_the_rate_limiter(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    fake.fail_next("sendMessage", 429, retry_after=3)
    async with running(fake) as adapter:
        sending = asyncio.create_task(adapter.send(at(PRIVATE), OutboundText("after the flood wait")))
        await fake.wait_for(lambda: fake.calls_to("sendMessage"), WAIT)
        await adapter.typing(at(PRIVATE))  # not paced, so not held by the flood wait
        assert not sending.done() and len(fake.calls_to("sendMessage")) == 1
        await asyncio.wait_for(sending, WAIT)
    first, second = fake.calls_to("sendMessage")
    assert (first.status, second.status) == (429, 200)
    assert second.time - first.time >= 3.0
    assert [m.text for m in fake.messages(PRIVATE)] == ["after the flood wait"]


async def test_a_persistent_429_becomes_a_retryable_delivery_error(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    fake.fail_next("sendMessage", 429, retry_after=1, count=2)
    async with running(fake, flood_retries=1) as adapter:
        with pytest.raises(DeliveryError) as info:
            await adapter.send(at(PRIVATE), OutboundText("still too fast"))
    assert (info.value.retryable, info.value.retry_after) == (True, 1.0)
    assert [c.status for c in fake.calls_to("sendMessage")] == [429, 429]


async def test_a_long_flood_wait_is_handed_to_the_caller_at_once(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    fake.register_chat(PRIVATE + 1)
    fake.fail_next("sendMessage", 429, retry_after=120)
    async with running(fake, max_flood_wait=30.0) as adapter, asyncio.timeout(WAIT):  # not 120 s
        with pytest.raises(DeliveryError) as info:
            await adapter.send(at(PRIVATE), OutboundText("hello"))
        await adapter.send(at(PRIVATE + 1), OutboundText("other chats are not held up"))
    assert (info.value.retryable, info.value.retry_after) == (True, 120.0)
    assert [c.status for c in fake.calls_to("sendMessage")] == [429, 200]


async def test_blocked_unknown_and_failing_chats(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    fake.register_chat(PRIVATE + 1)
    fake.forbid_chat(PRIVATE)
    fake.fail_network_next("sendMessage")
    async with running(fake) as adapter:
        with pytest.raises(DeliveryError) as dropped:
            await adapter.send(at(PRIVATE + 1), OutboundText("lost connection"))
        fake.fail_next("sendMessage", 500)
        with pytest.raises(DeliveryError) as server_error:
            await adapter.send(at(PRIVATE + 1), OutboundText("server error"))
        with pytest.raises(DeliveryError) as blocked:
            await adapter.send(at(PRIVATE), OutboundText("hello?"))
        with pytest.raises(DeliveryError) as unknown:
            await adapter.send(at(999), OutboundText("anyone?"))
    assert dropped.value.retryable and server_error.value.retryable
    assert blocked.value.permanent and not blocked.value.retryable
    assert unknown.value.permanent and "chat not found" in str(unknown.value).lower()


async def test_set_commands(fake: FakeTelegram) -> None:
    async with running(fake) as adapter:
        await adapter.set_commands([CommandSpec("new", "Start over"), CommandSpec("status", "Show status")])
    assert fake.commands() == [
        {"command": "new", "description": "Start over"},
        {"command": "status", "description": "Show status"},
    ]


async def test_outbound_before_start_is_a_retryable_error() -> None:
    adapter = TelegramAdapter("1:T")
    with pytest.raises(DeliveryError) as info:
        await adapter.send(at(PRIVATE), OutboundText("too early"))
    assert info.value.retryable
    await adapter.stop()  # stop without start is fine, and idempotent
    await adapter.stop()


async def test_a_wrong_token_fails_start_without_retry(fake: FakeTelegram) -> None:
    filters_before = list(logging.getLogger("httpx").filters)
    adapter = TelegramAdapter("999:WRONG", base_url=fake.base_url, **FAST)
    with pytest.raises(DeliveryError) as info:
        await asyncio.wait_for(adapter.start(Inbox()), WAIT)
    assert not info.value.retryable and not adapter.status().connected
    assert logging.getLogger("httpx").filters == filters_before


# --- polling faults ------------------------------------------------------------------------------


async def test_a_second_poller_is_logged_as_a_conflict_and_polling_goes_on(
    fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapters.telegram")
    inbox = Inbox()
    async with running(fake, inbox) as adapter:
        await fake.wait_for(lambda: [c for c in fake.calls_to("getUpdates") if c.status is None], WAIT)
        async with Bot(fake.token, base_url=fake.base_url) as other:
            assert await other.get_updates(timeout=0) == ()
        await fake.wait_for(lambda: [c for c in fake.calls_to("getUpdates") if c.status == 409], WAIT)
        await fake.wait_for(lambda: "Conflict" in adapter.status().detail, WAIT)
        fake.private_message(PRIVATE, "still listening")
        await inbox.stored(fake)
        await fake.wait_for(lambda: adapter.status().connected, WAIT)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "only one process may poll per bot token" in errors[0].getMessage()


async def test_network_errors_back_off_quietly_and_recover(
    fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # PTB and httpx at DEBUG too: the token must still not show
    fake.fail_network_next("getUpdates", 3)
    inbox = Inbox()
    async with running(fake, inbox):
        fake.private_message(PRIVATE, "through the storm")
        await inbox.stored(fake)
    ours = [r for r in caplog.records if r.name.startswith("adapters.telegram")]
    assert len([r for r in ours if r.levelno == logging.WARNING]) == 1  # once per streak
    assert any("recovered after 3 failed attempt(s)" in r.getMessage() for r in ours)
    assert next(r.getMessage() for r in ours if r.levelno == logging.INFO).startswith(
        "Telegram adapter started as @herald_bot, polling"
    )
    assert fake.token not in caplog.text and "bot<token>/getUpdates" in caplog.text


async def test_a_failing_poll_is_not_connected_until_polling_recovers_or_stops(fake: FakeTelegram) -> None:
    """``/readyz`` asks ``status``: a poller's failure is reported while it runs and clears when it
    reconnects; a process that stops polling (a cluster leader stepping down to a worker) sends on and
    is not judged by a poller it no longer runs."""
    async with running(fake) as adapter:
        fake.fail_network_next("getUpdates", 1000)
        fake.private_message(PRIVATE, "ends the poll under way")
        await fake.wait_for(lambda: not adapter.status().connected, WAIT, what="the poll failing")
        with fake.lock:
            fake.network_faults.clear()
        await fake.wait_for(lambda: adapter.status().connected, WAIT, what="polling again")
        assert adapter.status().detail == ""
        fake.fail_network_next("getUpdates", 1000)
        fake.private_message(PRIVATE, "ends the poll under way")
        await fake.wait_for(lambda: not adapter.status().connected, WAIT, what="the poll failing again")
        await adapter.stop_receiving()
        assert adapter.status().connected and adapter.status().detail == ""
        await adapter.send(at(PRIVATE), OutboundText("still sending"))
        assert [m.text for m in fake.messages(PRIVATE)] == ["still sending"]


# --- webhook mode --------------------------------------------------------------------------------


def update_body(fake: FakeTelegram, text: str = "via webhook") -> dict[str, Any]:
    """A queued DM update, as Telegram would POST it."""
    return fake.private_message(PRIVATE, text)


async def test_webhook_start_and_handle_webhook_statuses(fake: FakeTelegram) -> None:
    fake.webhook_autodeliver = False  # the test POSTs itself
    failing = {"on": False}

    async def maybe_fail(inbound: InboundMessage) -> None:
        if failing["on"]:
            raise RuntimeError("database is locked")

    inbox = Inbox(hook=maybe_fail)
    url = "https://herald.example/telegram"
    async with running(fake, inbox, mode="webhook", webhook_url=url) as adapter:
        (call,) = fake.calls_to("setWebhook")
        assert call.params["url"] == url and call.params["allowed_updates"] == ["message", "callback_query"]
        assert call.params["secret_token"] == adapter.webhook_secret == fake.webhook_secret
        assert not fake.calls_to("getUpdates")

        body = update_body(fake)
        assert await adapter.handle_webhook(body, "wrong") == 403
        assert await adapter.handle_webhook(body, None) == 403
        assert inbox.calls == []
        assert await adapter.handle_webhook(b"{not json", adapter.webhook_secret) == 400
        assert await adapter.handle_webhook(b"[1, 2]", adapter.webhook_secret) == 400
        failing["on"] = True
        assert await adapter.handle_webhook(body, adapter.webhook_secret) == 500
        failing["on"] = False
        raw = json.dumps(body).encode()  # bytes, as the HTTP server reads them
        assert await adapter.handle_webhook(raw, adapter.webhook_secret) == 200
        callback = {"update_id": 900, "callback_query": {"id": "q", "from": ADA, "chat_instance": "c"}}
        assert await adapter.handle_webhook(callback, adapter.webhook_secret) == 200  # nothing for us
    assert [m.text for m in inbox.calls] == ["via webhook", "via webhook"]
    assert [m.text for m in inbox.messages] == ["via webhook"]
    assert await adapter.handle_webhook(body, adapter.webhook_secret) == 503  # stopped


async def test_webhook_end_to_end_with_redelivery(fake: FakeTelegram) -> None:
    attempts: list[str] = []

    async def fail_once(inbound: InboundMessage) -> None:
        attempts.append(inbound.message_id)
        if len(attempts) == 1:
            raise RuntimeError("disk full")

    holder: dict[str, TelegramAdapter] = {}

    async def route(request: web.Request) -> web.Response:
        status = await holder["adapter"].handle_webhook(
            await request.read(), request.headers.get(SECRET_HEADER)
        )
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post("/telegram", route)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/telegram"
        inbox = Inbox(hook=fail_once)
        async with running(fake, inbox, mode="webhook", webhook_url=url) as adapter:
            holder["adapter"] = adapter
            pushed = fake.private_message(PRIVATE, "hooked")
            await fake.wait_for(lambda: fake.webhook_deliveries, WAIT)
            assert fake.webhook_deliveries[0].status == 500
            assert [u["update_id"] for u in fake.pending_updates()] == [pushed["update_id"]]
            assert await fake.retry_webhook() == [200]
            assert fake.pending_updates() == []
    finally:
        await runner.cleanup()
    assert [m.text for m in inbox.messages] == ["hooked"]
    assert attempts == [str(pushed["message"]["message_id"])] * 2


# --- receiving on demand (a cluster's elected poller) ----------------------------------------------


async def test_stop_receiving_hangs_up_a_long_poll_the_http_client_kept_open(
    fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader stepping down closes its held ``getUpdates`` before it returns, so the next leader's poll
    is the only one Telegram sees. httpcore can keep the connection of a request cancelled mid-flight
    (encode/httpcore#1093): here it always does, and the poll is hung up all the same, and the next
    term polls on a connection of its own."""
    responded = AsyncHTTP11Connection._response_closed

    async def kept_open_when_cancelled(connection: AsyncHTTP11Connection) -> None:
        task = asyncio.current_task()
        if task is None or not task.cancelling():
            await responded(connection)

    monkeypatch.setattr(AsyncHTTP11Connection, "_response_closed", kept_open_when_cancelled)
    inbox = Inbox()
    adapter = TelegramAdapter(fake.token, base_url=fake.base_url, **{**FAST, "poll_timeout": 4 * WAIT})
    await asyncio.wait_for(adapter.start(inbox, receive=False), WAIT)
    try:
        await asyncio.wait_for(adapter.start_receiving(), WAIT)
        await fake.wait_for(lambda: fake.open_polls == 1, WAIT)
        await asyncio.wait_for(adapter.stop_receiving(), WAIT)
        await fake.wait_for(lambda: fake.open_polls == 0, WAIT)  # without the hang-up: held 4 × WAIT
        await asyncio.wait_for(adapter.start_receiving(), WAIT)  # and polling again works
        fake.private_message(PRIVATE, "after the hang-up")
        await inbox.stored(fake, 1)
    finally:
        await asyncio.wait_for(adapter.stop(), WAIT)
    assert [m.text for m in inbox.messages] == ["after the hang-up"]
    assert fake.poll_overlaps == []


async def test_receive_on_demand_polls_only_between_start_and_stop_receiving(fake: FakeTelegram) -> None:
    """``start(receive=False)`` sends but neither deletes the webhook nor polls; receiving can be
    switched on and off again (a process elected, deposed, elected); nothing is lost meanwhile."""
    inbox = Inbox()
    adapter = TelegramAdapter(fake.token, base_url=fake.base_url, **FAST)
    assert adapter.receive_on_demand
    await asyncio.wait_for(adapter.start(inbox, receive=False), WAIT)
    try:
        fake.private_message(PRIVATE, "before anyone polls")
        await adapter.send(at(PRIVATE), OutboundText("sending works"))
        assert not fake.calls_to("getUpdates") and not fake.calls_to("deleteWebhook")
        assert adapter.status().connected and inbox.calls == []
        await asyncio.wait_for(adapter.start_receiving(), WAIT)
        await asyncio.wait_for(adapter.start_receiving(), WAIT)  # already receiving: nothing more
        assert len(fake.calls_to("deleteWebhook")) == 1
        await inbox.stored(fake, 1)
        await adapter.stop_receiving()
        # Sent after polling stopped: once it is recorded, so is any getUpdates still on its way.
        await adapter.send(at(PRIVATE), OutboundText("still sending"))
        deposed = len(fake.calls)
        fake.private_message(PRIVATE, "while deposed")
        await asyncio.wait_for(adapter.start_receiving(), WAIT)
        await inbox.stored(fake, 2)
    finally:
        await asyncio.wait_for(adapter.stop(), WAIT)
    # Nothing polled while deposed: the next call after "still sending" is the new deleteWebhook.
    assert fake.calls[deposed].method == "deleteWebhook"
    assert [m.text for m in inbox.messages] == ["before anyone polls", "while deposed"]
    assert [m.text for m in fake.messages(PRIVATE)] == ["sending works", "still sending"]
    assert fake.poll_overlaps == []
