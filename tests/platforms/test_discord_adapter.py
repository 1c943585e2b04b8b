"""The Discord adapter, through the real discord.py against the fake Discord (REST + gateway).

Pure tests build discord.py objects from the payloads the fake would send (no connection: the fake
is only a payload factory there, and discord.py's ``ConnectionState`` parses them); everything
else runs a real ``DiscordAdapter`` against ``FakeDiscord`` on loopback and asserts on what the
sink received and what the fake recorded. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, cast

import aiohttp
import discord
import discord.http
import pytest
from discord.user import ClientUser

import adapters.discord.adapter as adapter_module
from adapters.base import ChatAddress, ChatType, CommandSpec, DeliveryError, InboundMessage, OutboundText
from adapters.discord.adapter import DiscordAdapter
from adapters.discord.client import Endpoints, herald_intents
from adapters.discord.commands import command_name, command_payload, command_text
from adapters.discord.errors import delivery_error
from adapters.discord.inbound import BotIdentity, attachment_kind, interaction_to_inbound, to_inbound
from adapters.discord.interaction_records import KEEP_AFTER_EXPIRY, RECORDS, InteractionRecords, Role
from adapters.discord.interactions import interaction_record
from adapters.discord.ordering import ChatQueues
from adapters.discord.outbound import channel_id
from adapters.records import MemoryRecordStore
from resilience.backoff import Backoff
from tests.fakes.discord import DIRECT_MESSAGES, GUILD_MESSAGES, GUILDS, MESSAGE_CONTENT, FakeDiscord
from tests.fakes.waiting import WAIT_TIMEOUT as WAIT
from tests.fakes.waiting import wait_until

ADA = 4242
BOB = 4343
FAST: dict[str, Any] = {
    "identify_delay": 0.0,
    "guild_ready_timeout": 0.05,
    "start_timeout": WAIT,
    "request_timeout": WAIT,
}


def text(value: str) -> OutboundText:
    return OutboundText(value)


class Sink:
    """The gateway's entry point, recording what it got and whether one chat ever overlapped."""

    def __init__(self) -> None:
        self.received: list[InboundMessage] = []
        self.fail_next = 0
        self.slow: dict[str, float] = {}  # text -> seconds to take
        self.active: Counter[str] = Counter()
        self.overlapped = False

    async def __call__(self, messages: Sequence[InboundMessage]) -> None:
        [message] = messages  # Discord hands over one message at a time
        self.active[message.chat_id] += 1
        self.overlapped |= self.active[message.chat_id] > 1
        try:
            await asyncio.sleep(self.slow.get(message.text, 0))
            if self.fail_next:
                self.fail_next -= 1
                raise RuntimeError("database is locked")
            self.received.append(message)
        finally:
            self.active[message.chat_id] -= 1

    def texts(self) -> list[str]:
        return [m.text for m in self.received]


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord()
    async with server.serve():
        yield server


def make_adapter(fake: FakeDiscord, **options: Any) -> DiscordAdapter:
    token = options.pop("token", fake.token)
    return DiscordAdapter(
        token, **{"api_base": fake.rest_url, "gateway_url": fake.gateway_url, **FAST, **options}
    )


@asynccontextmanager
async def running(fake: FakeDiscord, sink: Sink, **options: Any) -> AsyncIterator[DiscordAdapter]:
    adapter = make_adapter(fake, **options)
    await adapter.start(sink)
    try:
        yield adapter
    finally:
        await asyncio.wait_for(adapter.stop(), WAIT)


async def received(fake: FakeDiscord, sink: Sink, count: int) -> list[InboundMessage]:
    await fake.wait_for(lambda: len(sink.received) >= count, WAIT, what=f"{count} message(s) in the sink")
    return sink.received


# --- pure: building discord.py objects from the fake's payloads -----------------------------------


class Parser:
    """discord.py's parsing state, fed the fake's guild: turns payloads into Message/Interaction."""

    def __init__(self, fake: FakeDiscord, *, bot_role_tag: bool = False) -> None:
        self.client = discord.Client(intents=herald_intents())
        self.state = self.client._connection
        self.state.user = ClientUser(state=self.state, data=fake.bot_user())  # type: ignore[arg-type]
        guild = fake.world.guild_create_api(fake.guild_id, me=fake.bot_id)
        if bot_role_tag:  # what Discord puts on a bot's managed role
            for role in guild["roles"]:
                if role["name"] == "herald":
                    role["tags"] = {"bot_id": str(fake.bot_id)}
                    self.bot_role = int(role["id"])
        self.state._add_guild_from_data(guild)  # type: ignore[arg-type]

    def message(self, payload: dict[str, Any]) -> discord.Message:
        channel, _ = self.state._get_guild_channel(payload)  # type: ignore[arg-type]
        return discord.Message(state=self.state, channel=channel, data=payload)  # type: ignore[arg-type]

    def interaction(self, payload: dict[str, Any]) -> discord.Interaction[Any]:
        return discord.Interaction(data=payload, state=self.state)  # type: ignore[arg-type]


@pytest.fixture
def offline() -> FakeDiscord:
    return FakeDiscord()  # not serving: a payload factory


def me(fake: FakeDiscord) -> BotIdentity:
    return BotIdentity(fake.bot_id, "herald")


def test_dm_is_direct_and_addressed(offline: FakeDiscord) -> None:
    payload = offline.dm_message(ADA, "  hello there ", username="ada")
    inbound = to_inbound(Parser(offline).message(payload), me(offline))
    assert inbound == InboundMessage(
        platform="discord",
        chat_id=str(offline.dm_channel(ADA)),
        chat_type=ChatType.DIRECT,
        user_id=str(ADA),
        user_name="Ada",
        message_id=payload["id"],
        text="hello there",
        timestamp=discord.utils.snowflake_time(int(payload["id"])).timestamp(),
        addressed=True,
    )


@pytest.mark.parametrize(
    ("content", "mention_bot", "addressed", "expected"),
    [
        ("just chatting", False, False, "just chatting"),
        ("what time is it?", True, True, "what time is it?"),  # "<@BOT> what time is it?"
        ("hey <@{bot}> look", False, True, "hey look"),
        ("hey <@!{bot}>, look", False, True, "hey , look"),
        ("<@{bot}>", False, True, "@herald"),  # nothing but the mention: never empty text
        ("ask <@{bob}> too", False, False, "ask @Bob too"),  # other people: their names
        ("<@{bot}> fix:\n```\nif x:\n    y  = 1\n```", False, True, "fix:\n```\nif x:\n    y  = 1\n```"),
    ],
)
def test_guild_addressing_and_mention_text(
    offline: FakeDiscord, content: str, mention_bot: bool, addressed: bool, expected: str
) -> None:
    offline.add_member(offline.guild_id, BOB, "bob")
    content = content.format(bot=offline.bot_id, bob=BOB)
    payload = offline.guild_message(offline.channel_id, ADA, content, mention_bot=mention_bot, username="ada")
    inbound = to_inbound(Parser(offline).message(payload), me(offline))
    assert inbound is not None
    assert (inbound.chat_type, inbound.chat_id, inbound.chat_title) == (
        ChatType.GROUP,
        str(offline.channel_id),
        "#general",
    )
    assert (inbound.addressed, inbound.text) == (addressed, expected)


def test_the_bots_managed_role_counts_as_a_mention(offline: FakeDiscord) -> None:
    parser = Parser(offline, bot_role_tag=True)
    payload = offline.guild_message(offline.channel_id, ADA, f"<@&{parser.bot_role}> status?")
    inbound = to_inbound(parser.message(payload), me(offline))
    assert inbound is not None and inbound.addressed and inbound.text == "status?"


def test_reply_to_the_bot_is_addressed(offline: FakeDiscord) -> None:
    parser = Parser(offline)
    with offline.lock:  # a message of the bot's, as if it had sent one
        from tests.fakes.discord.messages import create_message

        bot_msg = create_message(
            offline, offline.channel_id, {"content": "It is noon."}, [], author_id=offline.bot_id
        )
    to_bot = offline.guild_message(offline.channel_id, ADA, "thanks", reply_to_bot_message_id=bot_msg.id)
    person = offline.guild_message(offline.channel_id, BOB, "first")
    to_person = offline.guild_message(offline.channel_id, ADA, "agreed", reply_to=int(person["id"]))
    replied = to_inbound(parser.message(to_bot), me(offline))
    other = to_inbound(parser.message(to_person), me(offline))
    assert replied is not None and replied.addressed and replied.reply_to_id == str(bot_msg.id)
    assert other is not None and not other.addressed and other.reply_to_id == person["id"]


def test_a_thread_is_its_own_chat_and_free_response_follows_the_parent(offline: FakeDiscord) -> None:
    thread = offline.add_thread(offline.channel_id, "long task")
    payload = offline.guild_message(offline.channel_id, ADA, "in the thread", thread_id=thread)
    message = Parser(offline).message(payload)
    plain = to_inbound(message, me(offline))
    free = to_inbound(message, me(offline), free_response={str(offline.channel_id)})
    assert plain is not None and free is not None
    assert (plain.chat_id, plain.thread_id, plain.chat_title) == (str(thread), None, "long task")
    assert not plain.addressed and free.addressed
    assert to_inbound(message, me(offline), free_response={str(thread)}).addressed  # type: ignore[union-attr]


def test_bots_webhooks_system_and_empty_messages_are_ignored(offline: FakeDiscord) -> None:
    parser = Parser(offline)
    offline.add_user(77, "otherbot", bot=True)
    from_bot = offline.guild_message(offline.channel_id, 77, "beep")
    webhook = {**offline.guild_message(offline.channel_id, ADA, "hook"), "webhook_id": "99"}
    pinned = {**offline.guild_message(offline.channel_id, ADA, "x"), "type": 6}  # a pin notice
    empty = {**offline.guild_message(offline.channel_id, ADA, "secret"), "content": ""}  # no intent
    own = {**offline.guild_message(offline.channel_id, ADA, "echo"), "author": offline.bot_user()}
    for payload in (from_bot, webhook, pinned, empty, own):
        assert to_inbound(parser.message(payload), me(offline)) is None


def test_attachments(offline: FakeDiscord) -> None:
    payload = offline.dm_message(ADA, "", files={"notes.txt": b"hello", "cat.png": b"\x89PNG"})
    inbound = to_inbound(Parser(offline).message(payload), me(offline))
    assert inbound is not None and inbound.text == ""
    notes, cat = inbound.attachments
    assert (notes.kind, notes.name, notes.mime_type, notes.size) == ("document", "notes.txt", "text/plain", 5)
    assert notes.file_id.endswith("/notes.txt")
    assert (cat.kind, cat.mime_type) == ("photo", "image/png")
    assert attachment_kind("audio/ogg", voice=True) == "voice"
    assert [attachment_kind(t) for t in ("audio/mpeg", "video/mp4", None)] == ["audio", "video", "document"]


def test_an_attachment_without_a_content_type_is_known_by_its_name(offline: FakeDiscord) -> None:
    payload = offline.dm_message(ADA, "", files={"shot.png": b"\x89PNG", "talk.mp3": b"ID3"})
    for attachment in payload["attachments"]:
        del attachment["content_type"]  # Discord leaves it out for some uploads
    inbound = to_inbound(Parser(offline).message(payload), me(offline))
    assert inbound is not None
    assert [(a.kind, a.mime_type) for a in inbound.attachments] == [
        ("photo", "image/png"),
        ("audio", "audio/mpeg"),
    ]


def test_stickers_and_polls_arrive_instead_of_silence(offline: FakeDiscord) -> None:
    stickers = {
        **offline.dm_message(ADA, ""),
        "sticker_items": [{"id": "5", "name": "Wave", "format_type": 1}],
    }
    inbound = to_inbound(Parser(offline).message(stickers), me(offline))
    assert inbound is not None and inbound.text == ""
    [sticker] = inbound.attachments
    assert (sticker.kind, sticker.name, sticker.mime_type) == ("sticker", "Wave", "image/png")
    assert sticker.file_id.endswith("/stickers/5.png")
    question = {"text": "Lunch?"}
    answers = [
        {"answer_id": 1, "poll_media": {"text": "yes"}},
        {"answer_id": 2, "poll_media": {"text": "no"}},
    ]
    poll = {
        "question": question,
        "answers": answers,
        "expiry": "2030-01-01T00:00:00+00:00",
        "allow_multiselect": False,
        "layout_type": 1,
    }
    inbound = to_inbound(Parser(offline).message({**offline.dm_message(ADA, ""), "poll": poll}), me(offline))
    assert inbound is not None and inbound.text == "[poll: Lunch? — yes / no]"


def test_a_guild_missing_from_the_cache_is_not_a_dm(offline: FakeDiscord) -> None:
    payload = offline.guild_message(offline.channel_id, ADA, "hi")
    parser = Parser(offline)
    parser.state._remove_guild(parser.state._get_guild(offline.guild_id))  # type: ignore[arg-type]
    inbound = to_inbound(parser.message(payload), me(offline))
    assert inbound is not None and inbound.chat_type is ChatType.GROUP and not inbound.addressed


def test_slash_command_interaction(offline: FakeDiscord) -> None:
    parser = Parser(offline)
    payload = offline.interaction(
        "model", {"args": "openai:gpt-5"}, user_id=ADA, channel_id=offline.channel_id
    )
    inbound = interaction_to_inbound(parser.interaction(payload))
    assert inbound is not None
    assert (inbound.text, inbound.message_id, inbound.addressed) == (
        "/model openai:gpt-5",
        payload["id"],
        True,
    )
    assert (inbound.chat_id, inbound.chat_type) == (str(offline.channel_id), ChatType.GROUP)
    in_dm = interaction_to_inbound(parser.interaction(offline.interaction("help", user_id=BOB)))
    assert in_dm is not None and in_dm.chat_type is ChatType.DIRECT and in_dm.text == "/help"
    assert in_dm.chat_id == str(offline.dm_channel(BOB))
    context_menu = offline.interaction("help", user_id=BOB)
    context_menu["data"]["type"] = 2
    assert interaction_to_inbound(parser.interaction(context_menu)) is None


def test_command_text_and_payload() -> None:
    assert command_text({"name": "help"}) == "/help"
    assert command_text({"name": "model", "options": [{"name": "args", "type": 3, "value": " gpt-5 "}]}) == (
        "/model gpt-5"
    )
    nested = {"name": "memory", "options": [{"name": "forget", "type": 1, "options": [{"value": "pets"}]}]}
    assert command_text(nested) == "/memory forget pets"
    assert command_name("/model gpt-5") == "model"
    payload = command_payload(
        [
            CommandSpec("help", "this list"),
            CommandSpec("Bad Name", "refused by Discord"),
            CommandSpec("help", "a duplicate"),
            CommandSpec("long", "x" * 150),
        ]
    )
    assert [c["name"] for c in payload] == ["help", "long"]
    assert payload[0]["description"] == "this list" and len(payload[1]["description"]) == 100
    assert payload[0]["options"] == [
        {"type": 3, "name": "args", "description": "arguments, if the command takes any", "required": False}
    ]


class Response:
    """What ``discord.HTTPException`` reads from an aiohttp response."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status, self.reason, self.headers = status, "Reason", headers or {}


def http_error(kind: type[discord.HTTPException], status: int, *args: Any) -> discord.HTTPException:
    """``kind(response, body)``; ``args`` is ``(body,)`` or ``(headers, body)``."""
    headers, body = args if len(args) == 2 else ({}, args[0])
    return kind(cast(aiohttp.ClientResponse, Response(status, headers)), body)


@pytest.mark.parametrize(
    ("exc", "retryable", "permanent", "retry_after"),
    [
        (discord.RateLimited(42.0), True, False, 42.0),
        (
            http_error(discord.HTTPException, 429, {"X-RateLimit-Reset-After": "1.5"}, {"code": 0}),
            True,
            False,
            1.5,
        ),
        (http_error(discord.HTTPException, 429, {"Retry-After": "3"}, "cloudflare"), True, False, 3.0),
        (http_error(discord.DiscordServerError, 503, {"code": 0}), True, False, None),
        (
            http_error(discord.Forbidden, 403, {"code": 50013, "message": "Missing Permissions"}),
            False,
            True,
            None,
        ),
        (http_error(discord.Forbidden, 403, {"code": 50007, "message": "Cannot send"}), False, True, None),
        (http_error(discord.NotFound, 404, {"code": 10003, "message": "Unknown Channel"}), False, True, None),
        (
            http_error(discord.HTTPException, 400, {"code": 50035, "message": "Invalid Form Body"}),
            False,
            False,
            None,
        ),
        (aiohttp.ClientConnectionError("reset"), True, False, None),
        (TimeoutError(), True, False, None),
    ],
)
def test_error_mapping(
    exc: BaseException, retryable: bool, permanent: bool, retry_after: float | None
) -> None:
    error = delivery_error(exc, "send message", "SECRET.TOKEN")
    assert (error.retryable, error.permanent, error.retry_after, error.formatting) == (
        retryable,
        permanent,
        retry_after,
        False,
    )
    assert str(error).startswith("Discord send message failed: ")


def test_a_global_429_pauses_the_whole_bot_and_a_route_429_only_its_chat() -> None:
    def limited(headers: dict[str, str]) -> bool:
        return delivery_error(http_error(discord.HTTPException, 429, headers, {}), "send", "T").bot_wide

    assert limited({"Retry-After": "2", "X-RateLimit-Global": "true"})
    assert limited({"Retry-After": "2", "X-RateLimit-Scope": "global"})
    assert not limited({"Retry-After": "2", "X-RateLimit-Scope": "user"})
    assert not delivery_error(discord.RateLimited(5.0), "send", "T").bot_wide


def test_error_text_never_contains_the_token() -> None:
    error = delivery_error(aiohttp.ClientError("Bot SECRET.TOKEN refused"), "login", "SECRET.TOKEN")
    assert "SECRET.TOKEN" not in str(error) and "<token>" in str(error)


async def test_interaction_records_in_memory_are_bounded_and_kept_a_while_past_expiry(
    offline: FakeDiscord,
) -> None:
    parser = Parser(offline)
    now = [time.time()]
    store = MemoryRecordStore(RECORDS, limit=2, clock=lambda: now[0])
    records = InteractionRecords(store)
    first, second, third = (
        interaction_record(
            parser.interaction(offline.interaction("help", user_id=ADA)),
            command="help",
            ephemeral=False,
            deferred=True,
        )
        for _ in range(3)
    )
    await records.remember(first)
    await records.add_message(first.id, "111", Role.ORIGINAL)
    await records.add_message(first.id, "112", Role.FOLLOWUP)
    found = await records.owner_of("112")
    assert found is not None and found.id == first.id and found.message(Role.ORIGINAL) == "111"
    created = discord.utils.snowflake_time(int(first.id)).timestamp()
    assert first.expires_at == pytest.approx(created + 15 * 60 - 30, abs=0.01)  # the token's life
    await records.remember(second)
    await records.remember(third)  # over the limit: the oldest goes
    assert await records.find(first.id) is None and await records.owner_of("111") is None
    assert len(store) == 2
    now[0] = second.expires_at + 1  # expired: kept (an answer that comes late is still private)
    assert await records.find(second.id) is not None
    now[0] = second.expires_at + KEEP_AFTER_EXPIRY + 1
    await records.remember(replace(first, id="4", expires_at=now[0] + 870))  # the others kept long enough
    assert await records.find(second.id) is None and await records.find(third.id) is None
    assert len(store) == 1


def test_addresses_and_endpoints() -> None:
    assert channel_id(ChatAddress("discord", "123")) == 123
    assert channel_id(ChatAddress("discord", "123", thread_id="456")) == 456
    with pytest.raises(DeliveryError) as bad:
        channel_id(ChatAddress("discord", "general"))
    assert bad.value.permanent
    original = discord.http.Route.BASE
    endpoints = Endpoints("http://127.0.0.1:1/api/v10/", None)
    endpoints.apply()
    assert discord.http.Route.BASE == "http://127.0.0.1:1/api/v10"
    endpoints.restore()
    assert original == discord.http.Route.BASE


async def test_chat_queues_keep_order_per_chat_only() -> None:
    seen: list[str] = []
    gate = asyncio.Event()

    async def handle(item: str) -> None:
        if item == "a1":
            await gate.wait()
        if item == "a2":
            raise RuntimeError("logged, and the next item still comes")
        seen.append(item)

    queues: ChatQueues[str] = ChatQueues(handle)
    for key, item in [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1")]:
        assert queues.submit(key, item)
    await wait_until(lambda: seen, what="b1 handled while a1 waits")  # chat b does not wait for a
    gate.set()
    await wait_until(lambda: len(seen) == 3, what="chat a handled")
    assert seen == ["b1", "a1", "a3"]  # chat a in order: a3 only after a1 (and a2's failure)
    assert queues.submit("a", "late") and await queues.close(1.0) <= 1
    assert not queues.submit("a", "after close")


# --- through discord.py: connecting -----------------------------------------------------------------


async def test_start_connects_with_herald_intents_and_logs_one_line(
    fake: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    original_base = discord.http.Route.BASE
    sink = Sink()
    adapter = make_adapter(fake)
    await adapter.start(sink)
    try:
        status = adapter.status()
        assert status.connected and status.extra["bot"] == "herald" and status.extra["guilds"] == "1"
        assert adapter.identity == BotIdentity(fake.bot_id, "herald")
        intents = fake.requested_intents()
        assert intents == GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT  # no members
        assert fake.rest_url == discord.http.Route.BASE
    finally:
        await asyncio.wait_for(adapter.stop(), WAIT)
    await asyncio.wait_for(adapter.stop(), 1)  # idempotent
    assert not adapter.status().connected
    assert original_base == discord.http.Route.BASE
    started_lines = [r.getMessage() for r in caplog.records if "Discord adapter started" in r.getMessage()]
    assert started_lines == [
        f"Discord adapter started as herald ({fake.bot_id}) in 1 guild(s): Herald Test Server"
    ]
    assert fake.token not in caplog.text
    assert not [r for r in caplog.records if r.name.startswith("discord") and r.levelno < logging.WARNING]
    assert logging.getLogger("discord").level == logging.NOTSET  # put back after stop
    with pytest.raises(DeliveryError) as stopped:
        await adapter.send(ChatAddress("discord", str(fake.channel_id)), text("late"))
    assert stopped.value.retryable


async def test_missing_message_content_intent_is_a_clear_start_error() -> None:
    fake = FakeDiscord(enabled_privileged_intents=())
    original_base = discord.http.Route.BASE
    async with fake.serve():
        adapter = make_adapter(fake)
        with pytest.raises(DeliveryError) as failed:
            await adapter.start(Sink())
    assert '"Message Content Intent"' in str(failed.value) and "developer portal" in str(failed.value)
    assert not failed.value.retryable
    assert isinstance(failed.value.__cause__, discord.PrivilegedIntentsRequired)
    assert fake.connections[0].close_code == 4014
    assert not adapter.status().connected and original_base == discord.http.Route.BASE


async def test_a_wrong_token_is_a_start_error(fake: FakeDiscord) -> None:
    adapter = make_adapter(fake, token="WRONG.TOKEN")
    with pytest.raises(DeliveryError) as failed:
        await adapter.start(Sink())
    assert "DISCORD_BOT_TOKEN" in str(failed.value) and not failed.value.retryable
    assert "WRONG.TOKEN" not in str(failed.value)


@pytest.mark.parametrize("start_timeout", [0.1, WAIT])
async def test_an_unreachable_gateway_is_a_retryable_start_error(
    fake: FakeDiscord, start_timeout: float
) -> None:
    """0.1 s: no READY in time. 30 s: discord.py's first reconnect (after 0-1 s) crashes first."""
    adapter = make_adapter(fake, gateway_url="ws://127.0.0.1:1/gateway", start_timeout=start_timeout)
    with pytest.raises(DeliveryError) as failed:
        await adapter.start(Sink())
    assert failed.value.retryable
    if start_timeout > 1:
        assert "could not connect to Discord's gateway: ClientConnectorError" in str(failed.value)


# --- through discord.py: inbound --------------------------------------------------------------------


async def test_dms_guild_mentions_replies_and_threads(fake: FakeDiscord) -> None:
    sink = Sink()
    thread = fake.add_thread(fake.channel_id, "support")
    async with running(fake, sink) as adapter:
        fake.dm_message(ADA, "hello in private", username="ada")
        fake.guild_message(fake.channel_id, BOB, "chatter", username="bob")
        fake.guild_message(fake.channel_id, BOB, "what time is it?", mention_bot=True)
        fake.guild_message(fake.channel_id, BOB, "in the thread", thread_id=thread)
        await received(fake, sink, 4)  # in order per chat; chats do not wait for each other
        dm, chatter, mention, threaded = (
            by_text(sink, t) for t in ("hello in private", "chatter", "what time is it?", "in the thread")
        )
        bot_msg = await adapter.send(ChatAddress("discord", str(fake.channel_id)), text("It is noon."))
        fake.guild_message(fake.channel_id, BOB, "thanks", reply_to_bot_message_id=int(bot_msg))
        await received(fake, sink, 5)
        reply = by_text(sink, "thanks")
        answer = await adapter.send(reply_address(threaded), text("answer in the thread"))

    assert (dm.chat_type, dm.addressed, dm.user_name) == (ChatType.DIRECT, True, "Ada")
    assert (chatter.chat_type, chatter.addressed) == (ChatType.GROUP, False)
    assert (mention.addressed, mention.text) == (True, "what time is it?")
    assert (reply.addressed, reply.reply_to_id, reply.text) == (True, bot_msg, "thanks")
    assert (threaded.chat_id, threaded.thread_id, threaded.chat_title) == (str(thread), None, "support")
    assert [m.content for m in fake.messages(thread)] == ["answer in the thread"]
    assert fake.messages(thread)[0].message_id == int(answer)
    assert [m.content for m in fake.messages(fake.channel_id)] == ["It is noon."]
    # The bot's own messages come back over the gateway; they never reach the sink.
    assert len(sink.received) == 5 and all(m.user_id != str(fake.bot_id) for m in sink.received)


def heard_live(fake: FakeDiscord, message: dict[str, Any]) -> bool:
    """Whether ``message``'s MESSAGE_CREATE went to a connected session (rather than, at most, into
    the replay buffer of a session nobody is connected to, which only a RESUME would deliver)."""
    [created] = [d for d in fake.dispatches if d.event == "MESSAGE_CREATE" and d.data["id"] == message["id"]]
    live = set(fake.live_sessions())
    return any(session in live for session, _ in created.sessions)


def by_text(sink: Sink, wanted: str) -> InboundMessage:
    return next(m for m in sink.received if m.text == wanted)


def reply_address(message: InboundMessage) -> ChatAddress:
    return ChatAddress(message.platform, message.chat_id, message.thread_id)


async def test_free_response_channels_and_ignored_events(fake: FakeDiscord) -> None:
    sink = Sink()
    quiet = fake.add_text_channel(fake.guild_id, "quiet")
    fake.add_user(77, "otherbot", bot=True)
    async with running(fake, sink, free_response_channels=[str(fake.channel_id)]):
        first = fake.guild_message(fake.channel_id, BOB, "anyone?")
        fake.guild_message(fake.channel_id, 77, "I am a bot")
        fake.edit_user_message(int(first["id"]), "anyone at all?")
        fake.guild_message(quiet, BOB, "shh")
        fake.guild_message(fake.channel_id, BOB, "last")  # the channel's events are handled in order
        await fake.wait_for(lambda: "last" in sink.texts(), WAIT, what="the last message")
    assert sorted(sink.texts()) == ["anyone?", "last", "shh"]  # no bot message, no edit: as created
    assert by_text(sink, "anyone?").addressed and not by_text(sink, "shh").addressed


async def test_one_chat_in_order_others_not_blocked(fake: FakeDiscord) -> None:
    sink = Sink()
    sink.slow["slow"] = 0.3
    async with running(fake, sink):
        for words in ("slow", "a2", "a3"):
            fake.dm_message(ADA, words)
        fake.dm_message(BOB, "b1")
        await received(fake, sink, 4)
    assert sink.texts().index("b1") < sink.texts().index("a2")
    assert [t for t in sink.texts() if t != "b1"] == ["slow", "a2", "a3"]
    assert not sink.overlapped


async def test_a_failing_sink_is_retried_and_never_breaks_the_client(
    fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(adapter_module, "SINK_BACKOFF", Backoff(0.01, 0.01))
    monkeypatch.setattr(adapter_module, "SINK_TRIES", 2)
    sink = Sink()
    async with running(fake, sink) as adapter:
        sink.fail_next = 1
        fake.dm_message(ADA, "stored on the second try")
        await received(fake, sink, 1)
        sink.fail_next = 2
        fake.dm_message(ADA, "lost")
        fake.dm_message(ADA, "next one")
        await received(fake, sink, 2)
        assert adapter.status().connected and "not stored" in adapter.status().detail
    assert sink.texts() == ["stored on the second try", "next one"]
    assert any("failed 2 times; it is lost" in r.getMessage() for r in caplog.records)


async def test_a_replayed_message_reaches_the_sink_again(fake: FakeDiscord) -> None:
    sink = Sink()
    async with running(fake, sink) as adapter:
        first = fake.dm_message(ADA, "before the drop")
        await received(fake, sink, 1)
        assert fake.force_reconnect(resume=True) == 1
        fake.replay(int(first["id"]))
        await received(fake, sink, 2)
        await fake.wait_for(lambda: adapter.status().connected, WAIT, what="connected again")
        assert adapter.status().detail == ""  # the loss it reported is over (the console shows it)
    assert [m.message_id for m in sink.received] == [first["id"], first["id"]]  # the gateway dedups
    assert [c.op for c in fake.connections] == ["identify", "resume"]


async def test_stop_receiving_keeps_sending(fake: FakeDiscord) -> None:
    sink = Sink()
    async with running(fake, sink) as adapter:
        await adapter.stop_receiving()
        assert not heard_live(fake, fake.dm_message(ADA, "too late"))
        sent = await adapter.send(ChatAddress("discord", str(fake.dm_channel(ADA))), text("queued reply"))
        assert fake.message(int(sent)).content == "queued reply"
    assert sink.received == [] and [c.op for c in fake.connections] == ["identify"]  # nothing resumed


async def test_receive_on_demand_connects_the_shards_it_is_given(fake: FakeDiscord) -> None:
    """``start(receive=False)`` logs in for sending and opens no gateway connection; shards are
    connected and closed one by one (a cluster spreads them over its processes); a guild's messages
    come through its own shard, direct messages through shard 0."""
    other = fake.add_guild("second", guild_id=(1001 << 22) + 1)  # shard 1 of 2; the first guild's is
    channel = fake.add_text_channel(other, "general")  # whatever its id says
    first_shard = (fake.guild_id >> 22) % 2
    sink = Sink()
    adapter = make_adapter(fake, shard_count=2)
    await asyncio.wait_for(adapter.start(sink, receive=False), WAIT)
    try:
        assert adapter.status().connected and fake.connections == [] and adapter.shards() == {}
        assert await adapter.recommended_shards() == 1  # what GET /gateway/bot says
        sent = await adapter.send(ChatAddress("discord", str(fake.channel_id)), text("sending works"))
        assert fake.message(int(sent)).content == "sending works"
        await asyncio.wait_for(adapter.receive_shard(1, 2), WAIT)
        assert adapter.shards() == {1: 2} and fake.live_shards() == [(1, 2)]
        fake.guild_message(channel, ADA, "on shard one", mention_bot=True)
        await received(fake, sink, 1)
        await asyncio.wait_for(adapter.receive_shard(0, 2), WAIT)
        fake.dm_message(ADA, "a direct message")
        fake.guild_message(fake.channel_id, ADA, f"on shard {first_shard}", mention_bot=True)
        await received(fake, sink, 3)
        await adapter.stop_shard(1)
        assert adapter.shards() == {0: 2} and fake.live_shards() == [(0, 2)]
        unheard = fake.guild_message(channel, ADA, "nobody runs shard one", mention_bot=True)
        assert not heard_live(fake, unheard) and adapter.status().connected
    finally:
        await asyncio.wait_for(adapter.stop(), WAIT)
    texts = sorted(m.text.removeprefix(f"<@{fake.bot_id}> ") for m in sink.received)
    assert texts == sorted(["on shard one", "a direct message", f"on shard {first_shard}"])
    assert fake.shard_overlaps() == [] and "resume" not in [c.op for c in fake.connections]


# --- through discord.py: outbound -------------------------------------------------------------------


async def test_sends_never_ping(fake: FakeDiscord) -> None:
    fake.add_member(fake.guild_id, BOB, "bob")
    address = ChatAddress("discord", str(fake.channel_id))
    async with running(fake, Sink()) as adapter:
        sent = await adapter.send(address, text(f"@everyone @here <@{BOB}> look"))
        await adapter.edit(address, sent, text(f"@everyone <@{BOB}> edited"))
    (message,) = fake.messages(fake.channel_id)
    assert message.content == f"@everyone <@{BOB}> edited"
    assert message.allowed_mentions == {"parse": []}
    assert not message.mention_everyone and message.mentions == ()
    post = fake.calls_to("POST /channels/*/messages")[0]
    patch = fake.calls_to("PATCH /channels/*/messages/*")[0]
    assert post.json["allowed_mentions"] == {"parse": []} and "message_reference" not in post.json
    assert patch.json["allowed_mentions"] == {"parse": []}


async def test_a_reply_notifies_only_the_asker(fake: FakeDiscord) -> None:
    fake.add_member(fake.guild_id, BOB, "bob")
    sink = Sink()
    async with running(fake, sink) as adapter:
        question = fake.guild_message(fake.channel_id, ADA, "question", mention_bot=True)
        deleted = fake.guild_message(fake.channel_id, ADA, "deleted soon", mention_bot=True)
        fake.delete_user_message(int(deleted["id"]))
        address = ChatAddress("discord", str(fake.channel_id))
        await adapter.send(address, text(f"@everyone <@{BOB}> answer"), reply_to=question["id"])
        await adapter.send(address, text("still sent"), reply_to=deleted["id"])
    reply, orphan = fake.messages(fake.channel_id)
    assert reply.reply_to == int(question["id"])
    assert reply.allowed_mentions == {"parse": [], "replied_user": True}
    assert reply.mentions == (ADA,) and not reply.mention_everyone
    assert orphan.content == "still sent" and orphan.reply_to is None
    assert (
        fake.calls_to("POST /channels/*/messages")[1].json["message_reference"]["fail_if_not_exists"] is False
    )


async def test_edit_delete_and_typing(fake: FakeDiscord) -> None:
    address = ChatAddress("discord", str(fake.channel_id))
    async with running(fake, Sink()) as adapter:
        sent = await adapter.send(address, text("draft"))
        await adapter.edit(address, sent, text("final"))
        await adapter.edit(address, sent, text("final"))  # the same text again: fine
        await adapter.delete(address, sent)
        await adapter.delete(address, sent)  # already gone: success
        with pytest.raises(DeliveryError) as gone:
            await adapter.edit(address, sent, text("too late"))
        await adapter.typing(address)
        fake.forbid_channel(fake.channel_id)
        await adapter.typing(address)  # best effort: never raises
        await adapter.typing(ChatAddress("discord", "not-a-channel"))
    (message,) = fake.messages(fake.channel_id)
    assert message.versions == ("draft", "final", "final") and message.deleted
    assert gone.value.permanent and not gone.value.retryable
    assert fake.typing(fake.channel_id) == 1


async def test_429s_are_retried_by_discord_py_then_reported(fake: FakeDiscord) -> None:
    address = ChatAddress("discord", str(fake.channel_id))
    async with running(fake, Sink()) as adapter:
        fake.fail_next("POST /channels/{channel_id}/messages", 429, retry_after=0.05, count=2)
        await adapter.send(address, text("after two 429s"))
        fake.fail_next("POST /channels/{channel_id}/messages", 429, retry_after=0.01, count=5)
        with pytest.raises(DeliveryError) as limited:
            await adapter.send(address, text("lost to five 429s"))
    assert [c.status for c in fake.calls_to("POST /channels/*/messages")] == [429, 429, 200] + [429] * 5
    assert limited.value.retryable and limited.value.retry_after == pytest.approx(0.01)
    assert [m.content for m in fake.messages(fake.channel_id)] == ["after two 429s"]


async def test_refusals_are_typed(fake: FakeDiscord) -> None:
    address = ChatAddress("discord", str(fake.channel_id))
    async with running(fake, Sink()) as adapter:
        fake.fail_next("POST /channels/*/messages", 403)
        with pytest.raises(DeliveryError) as forbidden:
            await adapter.send(address, text("denied"))
        fake.fail_next(
            "POST /channels/*/messages", 403, code=50007, message="Cannot send messages to this user"
        )
        with pytest.raises(DeliveryError) as no_dms:
            await adapter.send(address, text("denied"))
        with pytest.raises(DeliveryError) as unknown:
            await adapter.send(ChatAddress("discord", "12345"), text("nowhere"))
        with pytest.raises(DeliveryError) as too_long:
            await adapter.send(address, text("x" * 2001))
        fake.fail_next("POST /channels/*/messages", 503)
        with pytest.raises(DeliveryError) as unavailable:
            await adapter.send(address, text("later"))
        fake.fail_network_next("POST /channels/*/messages")
        with pytest.raises(DeliveryError) as dropped:
            await adapter.send(address, text("dropped"))
        await adapter.send(address, text("x" * 2000))
    assert forbidden.value.permanent and "50013" in str(forbidden.value)
    assert no_dms.value.permanent and "50007" in str(no_dms.value)
    assert unknown.value.permanent and "10003" in str(unknown.value)
    assert not too_long.value.retryable and not too_long.value.permanent and "2000" in str(too_long.value)
    assert unavailable.value.retryable and not unavailable.value.permanent
    assert dropped.value.retryable
    assert [m.content for m in fake.messages(fake.channel_id)] == ["x" * 2000]


async def test_set_commands_is_one_put(fake: FakeDiscord) -> None:
    async with running(fake, Sink()) as adapter:
        await adapter.set_commands([CommandSpec("help", "this list"), CommandSpec("model", "choose a model")])
    (sync,) = fake.command_syncs
    assert sync.guild_id is None
    assert [(c["name"], c["description"]) for c in sync.commands] == [
        ("help", "this list"),
        ("model", "choose a model"),
    ]
    assert [c.method for c in fake.calls if "/commands" in c.path] == ["PUT"]
    assert [c["name"] for c in fake.commands()] == ["help", "model"]


# --- through discord.py: slash commands --------------------------------------------------------------


async def test_slash_command_is_deferred_then_answered_through_send(fake: FakeDiscord) -> None:
    sink = Sink()
    async with running(fake, sink) as adapter:
        await adapter.set_commands([CommandSpec("help", "this list"), CommandSpec("model", "choose")])
        payload = fake.interaction("help", user_id=ADA, channel_id=fake.channel_id)
        iid = int(payload["id"])
        (inbound,) = await received(fake, sink, 1)
        first = fake.interaction_responses(iid)[0]
        address = reply_address(inbound)
        answer = await adapter.send(address, text("Commands: …"), reply_to=inbound.message_id)
        await adapter.edit(address, answer, text("Commands: /help, /model"))
        more = await adapter.send(address, text("part two"), reply_to=inbound.message_id)
        await adapter.edit(address, more, text("part two, edited"))
        await adapter.delete(address, more)
        fake.interaction("model", {"args": "gpt-5"}, user_id=BOB, channel_id=fake.channel_id)
        second = (await received(fake, sink, 2))[1]

    assert (inbound.text, inbound.message_id, inbound.addressed) == ("/help", str(iid), True)
    assert (second.text, second.user_id) == ("/model gpt-5", str(BOB))
    with fake.lock:
        record = fake.interactions[iid]
    assert (first.kind, first.type, first.ok, first.ephemeral) == ("callback", 5, True, False)
    assert first.time - record.created < 3.0  # deferred within Discord's deadline
    kinds = [r.kind for r in fake.interaction_responses(iid)]
    assert kinds == [
        "callback",
        "edit_original",
        "edit_original",
        "followup",
        "edit_followup",
        "delete_followup",
    ]
    assert all(r.ok for r in fake.interaction_responses(iid))
    assert answer == str(record.original_message_id)
    original = fake.message(int(answer))
    assert original.content == "Commands: /help, /model" and original.interaction_id == iid
    assert fake.message(int(more)).deleted
    edits = [r.data for r in fake.interaction_responses(iid) if r.kind != "callback"][:-1]
    assert all(data["allowed_mentions"] == {"parse": []} for data in edits)
    assert not fake.calls_to("POST /channels/*/messages")  # nothing went to the channel directly


async def test_ephemeral_commands_stay_private(fake: FakeDiscord) -> None:
    sink = Sink()
    async with running(fake, sink, ephemeral_commands={"status"}) as adapter:
        payload = fake.interaction("status", user_id=ADA, channel_id=fake.channel_id)
        (inbound,) = await received(fake, sink, 1)
        await adapter.send(reply_address(inbound), text("idle"), reply_to=inbound.message_id)
        await adapter.send(reply_address(inbound), text("more"), reply_to=inbound.message_id)
    callback, *_ = fake.interaction_responses(int(payload["id"]))
    assert callback.ephemeral
    assert [(m.content, m.ephemeral) for m in fake.messages(fake.channel_id)] == [
        ("idle", True),
        ("more", True),
    ]


async def test_an_interaction_that_cannot_be_answered_becomes_a_channel_message(fake: FakeDiscord) -> None:
    sink = Sink()
    async with running(fake, sink) as adapter:
        fake.interaction_deadline = 0.0  # the defer arrives too late: Discord answers 404 10062
        fake.interaction("help", user_id=ADA, channel_id=fake.channel_id)
        (inbound,) = await received(fake, sink, 1)
        sent = await adapter.send(reply_address(inbound), text("Commands: …"), reply_to=inbound.message_id)
    (message,) = fake.messages(fake.channel_id)
    assert message.message_id == int(sent) and message.content == "Commands: …" and message.reply_to is None


async def test_a_command_that_could_not_be_stored_is_answered_with_an_apology(
    fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "SINK_BACKOFF", Backoff(0.01, 0.01))
    monkeypatch.setattr(adapter_module, "SINK_TRIES", 2)
    sink = Sink()
    sink.fail_next = 2
    async with running(fake, sink):
        payload = fake.interaction("help", user_id=ADA, channel_id=fake.channel_id)
        iid = int(payload["id"])
        await fake.wait_for(lambda: len(fake.interaction_responses(iid)) == 2, WAIT, what="the apology")
    assert [r.kind for r in fake.interaction_responses(iid)] == ["callback", "edit_original"]
    (message,) = fake.messages(fake.channel_id)
    assert message.content == adapter_module.NOT_HANDLED and sink.received == []


async def test_a_deferred_command_is_answered_by_an_adapter_started_after_a_restart(
    fake: FakeDiscord,
) -> None:
    records = MemoryRecordStore(RECORDS)  # what the gateway keeps in its database
    sink = Sink()
    async with running(fake, sink, records=records, ephemeral_commands={"status"}):
        payload = fake.interaction("status", user_id=ADA, channel_id=fake.channel_id)
        (inbound,) = await received(fake, sink, 1)  # deferred, recorded, stored; then a restart
    iid = int(payload["id"])
    async with running(fake, Sink(), records=records, ephemeral_commands={"status"}) as adapter:
        address = reply_address(inbound)
        answer = await adapter.send(address, text("idle"), reply_to=inbound.message_id)
        await adapter.edit(address, answer, text("idle, edited"))
        more = await adapter.send(address, text("more"), reply_to=inbound.message_id)
    kinds = [r.kind for r in fake.interaction_responses(iid)]
    assert kinds == ["callback", "edit_original", "edit_original", "followup"]
    with fake.lock:
        assert answer == str(fake.interactions[iid].original_message_id)
    assert [(m.message_id, m.content, m.ephemeral) for m in fake.messages(fake.channel_id)] == [
        (int(answer), "idle, edited", True),
        (int(more), "more", True),
    ]
    assert not fake.calls_to("POST /channels/*/messages")


async def test_an_expired_interaction_falls_back_to_the_channel_and_a_private_one_to_a_notice(
    fake: FakeDiscord,
) -> None:
    records = InteractionRecords(MemoryRecordStore(RECORDS))
    sink = Sink()
    async with running(fake, sink, records=records.store, ephemeral_commands={"status"}) as adapter:
        fake.interaction("help", user_id=ADA, channel_id=fake.channel_id)
        fake.interaction("status", user_id=ADA, channel_id=fake.channel_id)
        public, private = await received(fake, sink, 2)
        address = reply_address(public)
        streamed = await adapter.send(address, text("thinking…"), reply_to=private.message_id)
        for message in (public, private):  # the tokens' 15 minutes pass
            await records.expire(message.message_id, time.time() - 1)
        answer = await adapter.send(address, text("Commands: …"), reply_to=public.message_id)
        await adapter.edit(address, streamed, text("private: your session"))  # only the webhook could
        notice = await adapter.send(address, text("private, part two"), reply_to=private.message_id)
        await adapter.edit(address, notice, text("private, edited"))
        await adapter.delete(address, notice)
    in_channel = [(m.content, m.ephemeral, m.deleted) for m in fake.messages(fake.channel_id)]
    assert in_channel == [
        ("", False, False),  # /help's deferred response, left "thinking" when its token expired
        ("thinking…", True, False),  # the private answer as far as it got, never replaced
        ("Commands: …", False, False),
        (adapter_module.NOT_PRIVATELY.format(name="status"), False, False),  # once, never edited
    ]
    assert [answer, notice] == [str(m.message_id) for m in fake.messages(fake.channel_id)[2:]]


async def test_concurrent_answers_to_one_interaction_fill_the_deferred_response_once(
    fake: FakeDiscord,
) -> None:
    sink = Sink()
    async with running(fake, sink) as adapter:
        payload = fake.interaction("help", user_id=ADA, channel_id=fake.channel_id)
        (inbound,) = await received(fake, sink, 1)
        parts = [text(f"part {n}") for n in range(4)]
        sent = await asyncio.gather(
            *(adapter.send(reply_address(inbound), part, reply_to=inbound.message_id) for part in parts)
        )
    kinds = [r.kind for r in fake.interaction_responses(int(payload["id"]))]
    assert kinds == ["callback", "edit_original", "followup", "followup", "followup"]
    assert len(set(sent)) == 4 and not fake.calls_to("POST /channels/*/messages")
