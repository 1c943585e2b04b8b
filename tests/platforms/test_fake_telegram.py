"""The fake Telegram Bot API server, driven by the real python-telegram-bot over loopback.

Every assertion is on what PTB observes (parsed objects, raised errors) or on what the fake
recorded, so these tests also pin down the Telegram semantics the gateway tests rely on:
offsets confirm, long polls wake, webhooks keep failed updates, validation errors match Telegram.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, BotCommand, BotCommandScopeChat, MessageEntity, Update
from telegram.constants import MessageEntityType
from telegram.error import BadRequest, Conflict, Forbidden, NetworkError, RetryAfter
from telegram.ext import (
    AIORateLimiter,
    Application,
    ApplicationBuilder,
    BaseHandler,
    CommandHandler,
    ContextTypes,
    ExtBot,
    MessageHandler,
    filters,
)

from tests.fakes.telegram import FakeTelegram, WaitTimeout
from tests.fakes.waiting import WAIT_TIMEOUT

PRIVATE = 42
GROUP = -1001234567890
FORUM = -1009876543210


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram()
    async with server.serve():
        yield server


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    client = Bot(fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url)
    async with client:
        yield client


@asynccontextmanager
async def running_app(
    fake: FakeTelegram, *handlers: BaseHandler[Any, Any, Any]
) -> AsyncIterator[Application]:
    """A polling PTB Application against the fake, stopped and shut down on exit."""
    builder = ApplicationBuilder().token(fake.token).base_url(fake.base_url)
    app = builder.base_file_url(fake.base_file_url).build()
    for handler in handlers:
        app.add_handler(handler)
    await app.initialize()
    try:
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0, timeout=1)
        await app.start()
        yield app
    finally:
        if app.updater is not None and app.updater.running:
            await app.updater.stop()
        if app.running:
            await app.stop()
        await app.shutdown()


# --- startup, polling, offsets ----------------------------------------------------------------------


async def test_initialize_uses_get_me(fake: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (bot.id, bot.username) == (123456, "herald_bot")
    assert me.is_bot and me.can_join_groups
    assert me.can_read_all_group_messages is False
    assert me.supports_inline_queries is False
    assert [c.method for c in fake.calls] == ["getMe", "getMe"]


async def test_private_message_reaches_a_handler(fake: FakeTelegram) -> None:
    seen: list[Update] = []

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        seen.append(update)
        await update.message.reply_text(f"echo: {update.message.text}")

    async with running_app(fake, MessageHandler(filters.TEXT & ~filters.COMMAND, echo)):
        pushed = fake.private_message(PRIVATE, "hello", first_name="Ada", username="ada")
        sent = await fake.wait_for(lambda: fake.messages(PRIVATE), what="the echo")
    assert [m.text for m in sent] == ["echo: hello"]
    assert seen[0].update_id == pushed["update_id"]
    assert seen[0].effective_user is not None and seen[0].effective_user.username == "ada"

    methods = [c.method for c in fake.calls]
    assert methods[:3] == ["getMe", "deleteWebhook", "getUpdates"]
    # On stop PTB polls once more, without waiting, to confirm everything it fetched.
    last = fake.calls_to("getUpdates")[-1]
    assert last.params == {"offset": pushed["update_id"] + 1, "timeout": 0}
    assert fake.pending_updates() == []


async def test_offsets_confirm_and_redeliver_brings_an_update_back(fake: FakeTelegram, bot: Bot) -> None:
    first = fake.private_message(7, "one")
    uid = first["update_id"]
    assert [u.update_id for u in await bot.get_updates(timeout=0)] == [uid]
    assert [u.update_id for u in await bot.get_updates(timeout=0)] == [uid]  # not confirmed yet
    assert await bot.get_updates(offset=uid + 1, timeout=0) == ()
    assert fake.pending_updates() == []

    fake.redeliver(uid)
    again = await bot.get_updates(timeout=0)
    assert [(u.update_id, u.message and u.message.text) for u in again] == [(uid, "one")]

    second = fake.private_message(7, "two")
    other_chat = fake.private_message(8, "elsewhere")
    assert second["update_id"] == uid + 1 and other_chat["update_id"] == uid + 2
    assert (first["message"]["message_id"], second["message"]["message_id"]) == (1, 2)
    assert other_chat["message"]["message_id"] == 1  # message ids are per chat


async def test_limit_allowed_updates_and_raw_updates(fake: FakeTelegram, bot: Bot) -> None:
    fake.private_message(PRIVATE, "first")
    fake.private_message(PRIVATE, "second")
    user = {"id": 77, "is_bot": False, "first_name": "Bo"}
    query = {"id": "cbq-1", "from": user, "chat_instance": "ci", "data": "yes"}
    raw = fake.push_update({"callback_query": query})
    assert len(await bot.get_updates(limit=1, timeout=0)) == 1

    messages = await bot.get_updates(allowed_updates=["message"], timeout=0)
    assert [u.message and u.message.text for u in messages] == ["first", "second"]
    assert raw["update_id"] not in [u["update_id"] for u in fake.pending_updates()]  # dropped for good
    assert fake.allowed_updates == ["message"]  # remembered, as on Telegram

    pushed = fake.push_update({"callback_query": query, "update_id": 500})
    assert pushed["update_id"] == 500
    assert await bot.get_updates(offset=messages[-1].update_id + 1, allowed_updates=[], timeout=0) != ()
    assert await bot.answer_callback_query("cbq-1", text="noted")
    assert fake.calls_to("answerCallbackQuery")[0].params == {"callback_query_id": "cbq-1", "text": "noted"}
    assert fake.private_message(PRIVATE, "next")["update_id"] == 501


async def test_long_poll_waits_and_wakes_at_once_on_push(fake: FakeTelegram, bot: Bot) -> None:
    started = time.monotonic()
    assert await bot.get_updates(timeout=1) == ()
    assert time.monotonic() - started >= 0.9

    poll = asyncio.create_task(bot.get_updates(timeout=3600))
    await fake.wait_for(lambda: [c for c in fake.calls_to("getUpdates") if c.status is None])
    fake.private_message(PRIVATE, "wake up")
    updates = await asyncio.wait_for(poll, WAIT_TIMEOUT)  # at once, not in an hour
    assert updates[0].message is not None and updates[0].message.text == "wake up"


async def test_a_second_poller_ends_the_first_with_conflict(fake: FakeTelegram, bot: Bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=3600))
    await fake.wait_for(lambda: [c for c in fake.calls_to("getUpdates") if c.status is None])
    async with Bot(fake.token, base_url=fake.base_url) as other:
        assert await other.get_updates(timeout=0) == ()
    with pytest.raises(Conflict, match="terminated by other getUpdates request"):
        await asyncio.wait_for(first, WAIT_TIMEOUT)
    assert len(fake.poll_overlaps) == 1  # the record of two pollers at once


async def test_one_poller_after_another_is_no_overlap(fake: FakeTelegram, bot: Bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=3600))
    await fake.wait_for(lambda: [c for c in fake.calls_to("getUpdates") if c.status is None])
    first.cancel()  # the poller stops (a leader stepping down): its connection closes
    await asyncio.wait({first})
    await fake.wait_for(lambda: all(c.status is not None for c in fake.calls_to("getUpdates")))
    async with Bot(fake.token, base_url=fake.base_url) as other:
        assert await other.get_updates(timeout=0) == ()
    assert fake.poll_overlaps == []


async def test_long_poll_ends_promptly_when_the_server_stops() -> None:
    fake = FakeTelegram()
    async with fake.serve() as url:
        bot = Bot(fake.token, base_url=url)
        await bot.initialize()
        poll = asyncio.create_task(bot.get_updates(timeout=3600))
        await fake.wait_for(lambda: [c for c in fake.calls_to("getUpdates") if c.status is None])
    try:
        assert await asyncio.wait_for(poll, WAIT_TIMEOUT) == ()  # answered, not cut off or an hour on
    finally:
        await bot.shutdown()


# --- groups and forums --------------------------------------------------------------------------------


async def test_group_mentions_commands_and_replies_are_what_ptb_recognises(
    fake: FakeTelegram, bot: Bot
) -> None:
    fake.group_message(GROUP, 5, "what's up?", mention_bot=True)
    fake.group_message(GROUP, 5, "status@herald_bot now", command=True)
    fake.group_message(GROUP, 5, "just chatting")
    mention, command, plain = await bot.get_updates(timeout=0)

    mentions_bot = filters.Mention("herald_bot")
    assert mentions_bot.check_update(mention) and not mentions_bot.check_update(plain)
    assert filters.COMMAND.check_update(command) and not filters.COMMAND.check_update(mention)
    assert CommandHandler("status", _ignore).check_update(command)
    assert command.message is not None and mention.message is not None
    entity = command.message.entities[0]
    assert (entity.type, entity.offset, entity.length) == (MessageEntityType.BOT_COMMAND, 0, 18)
    assert mention.message.text == "@herald_bot what's up?"
    assert mention.message.chat.type == "supergroup" and mention.message.chat.title == "Group"

    sent = await bot.send_message(GROUP, "hi all")
    reply = fake.group_message(GROUP, 5, "thanks", reply_to_bot_message_id=sent.message_id)
    (update,) = await bot.get_updates(offset=reply["update_id"], timeout=0)
    assert filters.REPLY.check_update(update)
    assert update.message is not None and update.message.reply_to_message is not None
    assert update.message.reply_to_message.from_user is not None
    assert update.message.reply_to_message.from_user.id == bot.id


async def test_privacy_mode_withholds_plain_group_chatter() -> None:
    fake = FakeTelegram(privacy_mode=True)
    hidden = fake.group_message(GROUP, 5, "just chatting")
    fake.group_message(GROUP, 5, "hey", mention_bot=True)
    fake.group_message(GROUP, 5, "/help")
    fake.group_message(GROUP, 5, "/help@other_bot")
    texts = [u["message"]["text"] for u in fake.pending_updates()]
    assert texts == ["@herald_bot hey", "/help"]
    assert hidden["update_id"] is None and len(fake.hidden_updates) == 2


async def test_forum_replies_land_in_the_topic(fake: FakeTelegram, bot: Bot) -> None:
    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        await update.message.reply_text("on topic")

    async with running_app(fake, MessageHandler(filters.Mention("herald_bot"), answer)):
        asked = fake.group_message(FORUM, 9, "help", is_forum=True, thread_id=77, mention_bot=True)
        sent = await fake.wait_for(lambda: fake.messages(FORUM, thread_id=77))
    assert asked["message"]["is_topic_message"] is True
    assert [(m.text, m.thread_id) for m in sent] == [("on topic", 77)]
    assert sent[0].reply_to_message_id == asked["message"]["message_id"]
    assert fake.calls_to("sendMessage")[0].params["message_thread_id"] == 77

    in_topic = await bot.send_message(FORUM, "direct", message_thread_id=77)
    general = await bot.send_message(FORUM, "general")
    assert in_topic.is_topic_message and in_topic.message_thread_id == 77
    assert general.message_thread_id is None
    assert [m.text for m in fake.messages(FORUM, thread_id=77)] == ["on topic", "direct"]


# --- flood control and faults ----------------------------------------------------------------------


async def test_429_raises_retry_after(fake: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # retry_after as a timedelta, no deprecation warning
    fake.register_chat(PRIVATE)
    fake.fail_next("sendMessage", 429, retry_after=3)
    with pytest.raises(RetryAfter) as info:
        await bot.send_message(PRIVATE, "too fast")
    assert info.value.retry_after == dtm.timedelta(seconds=3)
    (call,) = fake.calls_to("sendMessage")
    assert (call.status, call.description) == (429, "Too Many Requests: retry after 3")
    assert fake.messages(PRIVATE) == []
    await bot.send_message(PRIVATE, "later")  # the fault was for one call
    assert [m.text for m in fake.messages(PRIVATE)] == ["later"]


async def test_aioratelimiter_retries_through_a_429(
    fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    fake.register_chat(PRIVATE)
    fake.fail_next("sendMessage", 429, retry_after=1)
    limited = ExtBot(fake.token, base_url=fake.base_url, rate_limiter=AIORateLimiter(max_retries=1))
    async with limited:
        await limited.send_message(PRIVATE, "after the flood wait")
    calls = fake.calls_to("sendMessage")
    assert [c.status for c in calls] == [429, 200]
    assert calls[1].time - calls[0].time >= 1.0
    assert [m.text for m in fake.messages(PRIVATE)] == ["after the flood wait"]


async def test_network_fault_drops_the_connection(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_chat(PRIVATE)
    fake.fail_network_next("sendMessage")
    with pytest.raises(NetworkError):
        await bot.send_message(PRIVATE, "lost")
    await bot.send_message(PRIVATE, "delivered")
    assert [c.status for c in fake.calls_to("sendMessage")] == [0, 200]
    assert [m.text for m in fake.messages(PRIVATE)] == ["delivered"]


async def test_unknown_chat_and_blocked_user(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.send_message(999, "anyone?")
    fake.private_message(PRIVATE, "hi")
    fake.forbid_chat(PRIVATE)
    with pytest.raises(Forbidden, match="blocked by the user"):
        await bot.send_message(PRIVATE, "hello?")


# --- validation ------------------------------------------------------------------------------------


async def test_formatting_errors_are_bad_requests(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_chat(PRIVATE)
    # PTB capitalises the description, which lower-cases the rest: match case-insensitively.
    bad_html = {
        "<b>bold": 'can\'t find end tag corresponding to start tag "b"',
        "a<br>b": 'unsupported start tag "br" at byte offset 1',
        "<b><i>x</b></i>": 'unmatched end tag at byte offset 7, expected "</i>", found "</b>"',
        "<span>x</span>": 'tag "span" must have class "tg-spoiler" at byte offset 0',
    }
    for text, detail in bad_html.items():
        with pytest.raises(BadRequest) as info:
            await bot.send_message(PRIVATE, text, parse_mode="HTML")
        assert str(info.value).lower() == f"can't parse entities: {detail}".lower(), text
    with pytest.raises(BadRequest, match=r"(?i)character '\.' is reserved"):
        await bot.send_message(PRIVATE, "version 1.5", parse_mode="MarkdownV2")
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(PRIVATE, "short", entities=[MessageEntity("bold", 2, 10)])
    assert fake.messages(PRIVATE) == []

    ok = await bot.send_message(
        PRIVATE, '<b>bold</b> &amp; <a href="https://example.org/?a=1&amp;b=2">link</a>', parse_mode="HTML"
    )
    assert ok.text == "bold & link"
    assert fake.messages(PRIVATE)[-1].entities == [
        {"type": "bold", "offset": 0, "length": 4},
        {"type": "text_link", "offset": 7, "length": 4, "url": "https://example.org/?a=1&b=2"},
    ]
    # Offsets are UTF-16 code units: the emoji takes two.
    emoji = await bot.send_message(PRIVATE, "😀 hi", entities=[MessageEntity("bold", 3, 2)])
    assert emoji.entities[0].offset == 3
    await bot.send_message(PRIVATE, r"version 1\.5 `a.b`", parse_mode="MarkdownV2")


async def test_reject_formatting_next_spares_plain_text(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_chat(PRIVATE)
    fake.reject_formatting_next()
    await bot.send_message(PRIVATE, "plain passes")
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(PRIVATE, "<b>bold</b>", parse_mode="HTML")
    await bot.send_message(PRIVATE, "<b>bold again</b>", parse_mode="HTML")
    assert [m.text for m in fake.messages(PRIVATE)] == ["plain passes", "bold again"]


async def test_message_length_is_counted_in_utf16_units(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_chat(PRIVATE)
    await bot.send_message(PRIVATE, "x" * 4096)
    await bot.send_message(PRIVATE, "😀" * 2048)  # 4096 UTF-16 units
    await bot.send_message(PRIVATE, "<b>" + "x" * 4096 + "</b>", parse_mode="HTML")  # tags are free
    for text in ("x" * 4097, "😀" * 2049):
        with pytest.raises(BadRequest, match="Message is too long"):
            await bot.send_message(PRIVATE, text)
    with pytest.raises(BadRequest, match="Message text is empty"):
        await bot.send_message(PRIVATE, "   ")
    assert len(fake.messages(PRIVATE)) == 3


async def test_edits_deletes_and_not_modified(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_chat(PRIVATE)
    draft = await bot.send_message(PRIVATE, "draft")
    edited = await bot.edit_message_text("final", chat_id=PRIVATE, message_id=draft.message_id)
    assert edited.edit_date is not None  # type: ignore[union-attr]
    (current,) = fake.messages(PRIVATE)
    assert (current.text, current.edited, current.versions) == ("final", True, ("draft", "final"))

    with pytest.raises(BadRequest, match="Message is not modified: specified new message content"):
        await bot.edit_message_text("final", chat_id=PRIVATE, message_id=draft.message_id)
    bold = [MessageEntity("bold", 0, 5)]
    await bot.edit_message_text("final", chat_id=PRIVATE, message_id=draft.message_id, entities=bold)
    assert fake.messages(PRIVATE)[0].entities == [{"type": "bold", "offset": 0, "length": 5}]
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("x", chat_id=PRIVATE, message_id=999)

    assert await bot.delete_message(PRIVATE, draft.message_id)
    assert fake.messages(PRIVATE)[0].deleted
    with pytest.raises(BadRequest, match="Message to delete not found"):
        await bot.delete_message(PRIVATE, draft.message_id)
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await bot.edit_message_text("again", chat_id=PRIVATE, message_id=draft.message_id)


async def test_set_my_commands_is_recorded(fake: FakeTelegram, bot: Bot) -> None:
    await bot.set_my_commands([BotCommand("status", "Show status"), ("new", "Start over")])
    assert fake.commands() == [
        {"command": "status", "description": "Show status"},
        {"command": "new", "description": "Start over"},
    ]
    assert fake.set_my_commands_calls == 1
    assert [c.command for c in await bot.get_my_commands()] == ["status", "new"]

    scope = BotCommandScopeChat(PRIVATE)
    await bot.set_my_commands([("secret", "Only here")], scope=scope)
    assert [c["command"] for c in fake.commands(scope.to_dict())] == ["secret"]
    assert len(fake.commands()) == 2
    with pytest.raises(BadRequest, match="Bot_command_invalid"):
        await bot.set_my_commands([("Bad Name", "spaces and capitals")])
    assert await bot.delete_my_commands()
    assert fake.commands() == [] and fake.set_my_commands_calls == 2


async def test_chat_actions_documents_and_file_downloads(fake: FakeTelegram, bot: Bot) -> None:
    pushed = fake.private_message(PRIVATE, "see attached", document=b"file body", file_name="notes.md")
    await bot.send_chat_action(PRIVATE, "typing")
    assert [a.action for a in fake.typing_actions(PRIVATE)] == ["typing"]

    (update,) = await bot.get_updates(timeout=0)
    assert update.message is not None and update.message.document is not None
    assert update.message.caption == "see attached" and update.message.document.file_name == "notes.md"
    remote = await bot.get_file(update.message.document.file_id)
    assert bytes(await remote.download_as_bytearray()) == b"file body"
    assert pushed["message"]["document"]["file_id"] == update.message.document.file_id

    sent = await bot.send_document(
        PRIVATE, document=b"report", filename="r.txt", caption="<b>r</b>", parse_mode="HTML"
    )
    assert sent.document is not None and sent.caption == "r"
    (call,) = fake.calls_to("sendDocument")
    assert b"report" in call.files.values()
    assert [(m.kind, m.text) for m in fake.messages(PRIVATE)] == [("document", "r")]


# --- webhook ---------------------------------------------------------------------------------------


@dataclass
class Receiver:
    """A tiny webhook endpoint: records what arrives, answers ``status``."""

    status: int = 200
    seen: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.headers.get("X-Telegram-Bot-Api-Secret-Token"), await request.json()))
        return web.Response(status=self.status)


@asynccontextmanager
async def webhook_receiver() -> AsyncIterator[tuple[Receiver, str]]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield receiver, f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    finally:
        await runner.cleanup()


async def test_webhook_delivery_with_secret_and_retry(fake: FakeTelegram, bot: Bot) -> None:
    async with webhook_receiver() as (receiver, url):
        assert await bot.set_webhook(url, secret_token="s3cret-token")
        assert (await bot.get_webhook_info()).url == url
        with pytest.raises(Conflict, match="webhook is active"):
            await bot.get_updates(timeout=0)

        update = fake.private_message(5, "via webhook")
        assert await fake.post_webhook(update) == 200
        await fake.wait_idle()
        assert len(receiver.seen) == 1  # background delivery and post_webhook: one POST
        secret, body = receiver.seen[0]
        assert secret == "s3cret-token" and body["update_id"] == update["update_id"]
        parsed = Update.de_json(body, bot)
        assert parsed.message is not None and parsed.message.text == "via webhook"

        receiver.status = 500
        failed = fake.private_message(5, "retry me")
        await fake.wait_for(lambda: fake.webhook_deliveries[-1].status == 500)
        info = await bot.get_webhook_info()
        assert info.pending_update_count == 1
        assert info.last_error_message == "Wrong response from the webhook: 500 Internal Server Error"

        receiver.status = 200
        assert await fake.retry_webhook() == [200]
        assert fake.pending_updates() == []
        assert [b["update_id"] for _, b in receiver.seen] == [update["update_id"], *[failed["update_id"]] * 2]

        fake.webhook_autodeliver = False
        manual = fake.push_update({"message": {**failed["message"], "message_id": 50, "text": "manual"}})
        assert fake.pending_updates() != []
        assert await fake.post_webhook(manual) == 200
        assert receiver.seen[-1][1]["message"]["text"] == "manual"


# --- raw wire, threads, waiting ----------------------------------------------------------------------


async def test_raw_encodings_unknown_methods_and_tokens(fake: FakeTelegram) -> None:
    fake.register_chat(PRIVATE)
    api = f"{fake.base_url}{fake.token}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        async with http.post(f"{api}/fooBar") as resp:
            assert resp.status == 404
            not_found = {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
            assert await resp.json() == not_found
        async with http.post(f"{fake.base_url}1:WRONG/getMe") as resp:
            assert (resp.status, (await resp.json())["description"]) == (401, "Unauthorized")
        markup = {"inline_keyboard": [[{"text": "OK", "callback_data": "ok"}]]}
        payload = {"chat_id": PRIVATE, "text": "123", "reply_markup": markup}
        async with http.post(f"{api}/sendmessage", json=payload) as resp:  # names are case-insensitive
            result = (await resp.json())["result"]
            assert result["text"] == "123" and result["reply_markup"] == markup
        bold = json.dumps([{"type": "bold", "offset": 0, "length": 4}])
        form = {"chat_id": str(PRIVATE), "text": "true", "entities": bold}
        async with http.post(f"{api}/sendMessage", data=form) as resp:
            result = (await resp.json())["result"]
            assert result["text"] == "true" and result["entities"][0]["type"] == "bold"
    assert [c.method for c in fake.calls] == ["fooBar", "getMe", "sendMessage", "sendMessage"]
    assert fake.calls[-1].params["chat_id"] == PRIVATE


def test_serve_in_thread_for_sync_callers() -> None:
    fake = FakeTelegram()
    with fake.serve_in_thread() as url:

        def call(method: str, **params: Any) -> Any:
            data = urllib.parse.urlencode(params).encode()
            address = f"{url}{fake.token}/{method}"
            with urllib.request.urlopen(address, data=data, timeout=WAIT_TIMEOUT) as resp:
                return json.loads(resp.read())

        assert call("getMe")["result"]["username"] == "herald_bot"
        pusher = threading.Timer(0.2, lambda: fake.private_message(3, "from another thread"))
        pusher.start()
        updates = call("getUpdates", timeout=3600)["result"]  # woken by the push, not an hour on
        pusher.join()
        assert updates[0]["message"]["text"] == "from another thread"
        assert call("sendMessage", chat_id=3, text="answer")["ok"]
        assert fake.wait_for_sync(lambda: fake.messages(3))[0].text == "answer"


async def test_wait_for_timeout_says_what_it_saw(fake: FakeTelegram, bot: Bot) -> None:
    fake.register_chat(PRIVATE)
    await bot.send_message(PRIVATE, "something else")
    with pytest.raises(WaitTimeout) as info:
        await fake.wait_for(lambda: fake.messages(PRIVATE)[1], 0.05, what="a second message")
    message = str(info.value)
    assert "a second message" in message and "IndexError" in message
    assert "sendMessage -> 200" in message and "'something else'" in message
    assert isinstance(info.value, AssertionError) and isinstance(info.value, TimeoutError)


async def _ignore(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    return None
