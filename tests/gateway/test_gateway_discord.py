"""The gateway on Discord, end to end: real discord.py against the fake Discord, real SDK, emulator.

Discord is one more adapter of the same router: the same commands, authorization, delivery and
cache discipline as Telegram.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.base import Adapter
from adapters.discord.adapter import DiscordAdapter
from adapters.discord.interaction_records import RECORDS
from adapters.discord.spec import SPEC as DISCORD
from agent.db.base import Storage
from gateway import tables as schema
from gateway.app import Gateway, open_gateway
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.platforms.records import StoredRecords
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeDiscord, FakeTelegram
from tests.fakes.waiting import wait_until_awaited

ADMIN = 1001
FRIEND = 1002
STRANGER = 1003
FAST: dict[str, Any] = {"identify_delay": 0.0, "guild_ready_timeout": 0.05, "start_timeout": 5.0}

CODE_ANSWER = "\n\n".join(
    f"Step {n}: " + "explain the change carefully. " * 12 + f"\n\n```python\ndef step_{n}():\n"
    + "    return value * 2\n" * 20 + "```"
    for n in range(8)
)  # fmt: skip


@dataclass
class Harness:
    gateway: Gateway
    fake: FakeDiscord
    emulator: ProviderEmulator

    async def settled(self) -> None:
        """Wait until every event sent so far was read by discord.py, handed to the gateway, answered
        and the answers sent (checked in the order work flows, so nothing slips between two checks)."""
        await self.fake.wait_received()
        services = self.gateway.services
        [adapter] = [a for a in self.gateway.adapters if isinstance(a, DiscordAdapter)]

        async def idle() -> bool:
            return (
                adapter.inbound_backlog == 0
                and not await services.inbox.pending()
                and services.lanes.depth == 0
                and await services.outbox.pending_count() == 0
            )

        await wait_until_awaited(idle, what="the gateway idle", describe=self.fake.describe)

    def texts(self, channel_id: int) -> list[str]:
        return [m.content for m in self.fake.messages(channel_id) if not m.deleted]


def config(
    emulator_url: str,
    fake: FakeDiscord,
    *,
    stream: bool = True,
    max_attachment_mb: float = 20.0,
    gateway: dict[str, Any] | None = None,
    stt: dict[str, Any] | None = None,
    tts: dict[str, Any] | None = None,
    **discord: Any,
) -> Any:
    return make_config(
        emulator_url,
        stt=stt or {},
        tts=tts or {},
        gateway={
            "admins": [f"discord:{ADMIN}"],
            "http_port": 0,
            "stream_edit_interval": 0.05 if stream else 0,
            "max_attachment_mb": max_attachment_mb,
            **(gateway or {}),
        },
        discord={
            "allowed_users": [FRIEND],
            "api_base": fake.rest_url,
            "gateway_url": fake.gateway_url,
            **discord,
        },
    )


@asynccontextmanager
async def discord_gateway(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    fake: FakeDiscord | None = None,
    *,
    stream: bool = True,
    max_attachment_mb: float = 20.0,
    gateway: dict[str, Any] | None = None,
    stt: dict[str, Any] | None = None,
    tts: dict[str, Any] | None = None,
    **discord: Any,
) -> AsyncIterator[Harness]:
    fake = fake or FakeDiscord()
    for user in (ADMIN, FRIEND, STRANGER):
        fake.add_user(user, f"user{user}")
        fake.add_member(fake.guild_id, user, f"user{user}")
    async with fake.serve():
        settings = config(
            emulator_url,
            fake,
            stream=stream,
            max_attachment_mb=max_attachment_mb,
            gateway=gateway,
            stt=stt,
            tts=tts,
            **discord,
        )

        def adapters(storage: Storage) -> list[Adapter]:  # as build_adapters does, with test timings
            return [
                DiscordAdapter(
                    fake.token,
                    api_base=fake.rest_url,
                    gateway_url=fake.gateway_url,
                    free_response_channels=settings.platform_settings(DISCORD).free_response_channels,
                    ephemeral_commands={"help", "status"},
                    records=StoredRecords(storage, DISCORD.name, RECORDS),
                    **FAST,
                )
            ]

        async with open_gateway(settings, home, adapters=adapters) as opened:
            yield Harness(opened, fake, emulator)


def user_texts(body: dict[str, Any]) -> list[str]:
    return [
        block["text"]
        for message in body["messages"]
        if message["role"] == "user"
        for block in message["content"]
        if block.get("type") == "text"
    ]


async def test_direct_messages_are_answered_and_strangers_get_a_pairing_code(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with discord_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        fake.dm_message(FRIEND, "hello from Discord")
        fake.dm_message(STRANGER, "let me in")
        await harness.settled()
        friend_answer = harness.texts(fake.dm_channel(FRIEND))
        stranger_reply = harness.texts(fake.dm_channel(STRANGER))
    assert len(friend_answer) == 1 and friend_answer[0].startswith("Emulated reply")
    assert len(stranger_reply) == 1 and "herald pairing approve discord" in stranger_reply[0]
    assert len(emulator.requests) == 1 and user_texts(emulator.requests[0].json) == ["hello from Discord"]


async def test_a_file_over_the_size_limit_is_refused_with_a_reply_and_never_reaches_the_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with discord_gateway(home, emulator, emulator_url, max_attachment_mb=0.001) as harness:
        fake = harness.fake
        fake.dm_message(FRIEND, "what is in here?", files={"dump.bin": b"x" * 5_000})
        await harness.settled()
        fake.dm_message(FRIEND, "and this one?", files={"notes.txt": b"short"})
        await harness.settled()
        refusal, answer = harness.texts(fake.dm_channel(FRIEND))
    assert "dump.bin (5 kB)" in refusal and "up to 0.001 MB" in refusal and "Nothing" in refusal
    assert answer.startswith("Emulated reply")
    [request] = emulator.requests
    [text] = user_texts(request.json)
    assert text.startswith('<untrusted source="the file notes.txt">')
    assert text.endswith("</untrusted>\nand this one?")
    assert "\nshort\n" in text  # the file's text, read


async def test_in_a_server_the_bot_answers_when_mentioned_in_threads_and_in_free_channels(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeDiscord()
    free = fake.add_text_channel(fake.guild_id, "free-chat")
    async with discord_gateway(home, emulator, emulator_url, fake, free_response_channels=[free]) as harness:
        general = fake.channel_id
        fake.guild_message(general, FRIEND, "talking among ourselves", username="ada")
        fake.guild_message(general, FRIEND, "what is the plan?", mention_bot=True, username="ada")
        fake.guild_message(general, STRANGER, "me too!", mention_bot=True)
        fake.guild_message(free, FRIEND, "no mention needed here", username="ada")
        await harness.settled()
        thread = fake.add_thread(general, "planning")
        fake.guild_message(
            general, FRIEND, "in the thread", mention_bot=True, thread_id=thread, username="ada"
        )
        await harness.settled()
        sessions = await harness.gateway.services.runtime.store.sessions.recent()
        in_general, in_free, in_thread = harness.texts(general), harness.texts(free), harness.texts(thread)
    assert len(in_general) == 1 and len(in_free) == 1 and len(in_thread) == 1  # the stranger got nothing
    asked = [user_texts(r.json)[-1] for r in emulator.requests]
    assert any(text.endswith(": what is the plan?") for text in asked)  # mention stripped, speaker named
    assert any(text.endswith(": no mention needed here") for text in asked)
    assert len({s.session_key for s in sessions}) == 3  # the channel, the free channel, the thread


async def test_an_answer_with_control_characters_reaches_discord_clean(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="line one\r\nline\x00 two\x1b[0m"))
    async with discord_gateway(home, emulator, emulator_url, stream=False) as harness:
        harness.fake.dm_message(FRIEND, "hello")
        await harness.settled()
        answer = harness.texts(harness.fake.dm_channel(FRIEND))
    assert answer == ["line one\nline two[0m"]  # as on Telegram: CRs and control characters dropped


async def test_everyone_may_talk_in_an_allowed_channel_and_in_its_threads(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeDiscord()
    general = fake.channel_id
    other = fake.add_text_channel(fake.guild_id, "other")
    async with discord_gateway(home, emulator, emulator_url, fake, allowed_channels=[general]) as harness:
        thread = fake.add_thread(general, "planning")
        fake.guild_message(general, STRANGER, "in the channel", mention_bot=True)
        fake.guild_message(general, STRANGER, "in its thread", mention_bot=True, thread_id=thread)
        fake.guild_message(other, STRANGER, "elsewhere", mention_bot=True)
        await harness.settled()
        answered = (harness.texts(general), harness.texts(thread), harness.texts(other))
    assert [len(texts) for texts in answered] == [1, 1, 0]  # a thread follows its channel
    assert len(emulator.requests) == 2


async def test_a_long_answer_is_split_at_2000_and_nothing_in_it_pings_anyone(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="@everyone look at this! <@1002> `<#5>` " + CODE_ANSWER))
    async with discord_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        fake.guild_message(fake.channel_id, FRIEND, "explain", mention_bot=True)
        await harness.settled()
        messages = [m for m in fake.messages(fake.channel_id) if not m.deleted]
    assert len(CODE_ANSWER) > 5000 and len(messages) >= 3
    assert all(len(m.content) <= 2000 for m in messages)
    assert all(m.content.count("```") % 2 == 0 for m in messages)  # every part's code blocks are closed
    assert all(not m.mention_everyone and not m.mentions for m in messages)
    for message in messages:
        mentions = message.allowed_mentions or {}
        assert mentions.get("parse") == [] and not mentions.get("users")
    joined = "".join(m.content for m in messages)
    assert "def step_0():" in joined and "def step_7():" in joined
    # Shown as written: the mention escaped (Discord shows "\<@1002>" as "<@1002>"), the code as it is.
    assert joined.startswith("@everyone look at this! \\<@1002> `<#5>` Step 0")


async def test_slash_commands_come_from_the_same_table_and_are_synced_only_when_it_changed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeDiscord()
    async with discord_gateway(home, emulator, emulator_url, fake) as harness:
        interaction = fake.interaction(
            "help", user_id=FRIEND, channel_id=fake.channel_id, guild_id=fake.guild_id
        )
        await harness.settled()
        responses = fake.interaction_responses(int(interaction["id"]))
    async with discord_gateway(home, emulator, emulator_url, fake):
        pass
    assert len(fake.command_syncs) == 1
    synced = {command["name"] for command in fake.command_syncs[0].commands}
    assert {"new", "reset", "stop", "compress", "insights", "model", "memory", "status", "help"} <= synced
    assert emulator.requests == []
    assert responses[0].kind == "callback" and responses[0].type == 5  # deferred at once
    assert responses[0].data.get("flags") == 64  # /help is answered privately (ephemeral)
    assert any("Commands:" in json.dumps(r.data) for r in responses[1:])


async def test_a_private_answer_that_discord_refuses_is_never_posted_in_the_channel(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeDiscord()
    async with discord_gateway(home, emulator, emulator_url, fake) as harness:
        fake.fail_next("POST /interactions/*/*/callback", 404, code=10062, message="Unknown interaction")
        fake.interaction("status", user_id=FRIEND, channel_id=fake.channel_id, guild_id=fake.guild_id)
        await harness.settled()
        in_channel = harness.texts(fake.channel_id)
    assert in_channel == [
        "I could not answer /status privately (Discord refused the reply); please run it again."
    ]  # not the chat's session and model for everyone to read


async def test_a_message_replayed_after_a_reconnect_is_answered_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with discord_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        sent = fake.dm_message(FRIEND, "only once")
        await harness.settled()
        fake.force_reconnect(resume=True)
        await fake.wait_for_session()
        fake.replay(int(sent["id"]))
        await harness.settled()
        answers = harness.texts(fake.dm_channel(FRIEND))
    assert len(answers) == 1 and len(emulator.requests) == 1


async def test_one_gateway_serves_telegram_and_discord_at_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    discord, telegram = FakeDiscord(), FakeTelegram()
    discord.add_user(FRIEND, "ada")
    async with discord.serve(), telegram.serve() as telegram_url:
        settings = make_config(
            emulator_url,
            gateway={"http_port": 0, "stream_edit_interval": 0},
            telegram={"base_url": telegram_url, "allowed_users": [7]},
            discord={
                "allowed_users": [FRIEND],
                "api_base": discord.rest_url,
                "gateway_url": discord.gateway_url,
            },
        )
        environ = {"TELEGRAM_BOT_TOKEN": telegram.token, "DISCORD_BOT_TOKEN": discord.token}
        async with open_gateway(settings, home, environ=environ) as gateway:
            assert sorted(a.platform for a in gateway.adapters) == ["discord", "telegram"]
            telegram.private_message(7, "from Telegram")
            discord.dm_message(FRIEND, "from Discord")
            await telegram.wait_for(lambda: telegram.messages(7))
            await discord.wait_for(lambda: discord.messages(discord.dm_channel(FRIEND)))
            sessions = await gateway.services.runtime.store.sessions.recent()
    assert sorted(s.session_key for s in sessions) == [
        f"discord:dm:{discord.dm_channel(FRIEND)}",
        "telegram:dm:7",
    ]
    assert {tuple(user_texts(r.json)) for r in emulator.requests} == {("from Telegram",), ("from Discord",)}


def test_a_missing_message_content_intent_stops_the_start_with_what_to_enable(
    home: HeraldHome, herald: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.config import set_value

    fake = FakeDiscord(enabled_privileged_intents=())
    with fake.serve_in_thread() as urls:
        set_value(home.config_path, "discord.api_base", urls.rest)
        set_value(home.config_path, "discord.gateway_url", urls.gateway)
        set_value(home.config_path, "gateway.http_port", "0")
        monkeypatch.setenv("DISCORD_BOT_TOKEN", fake.token)
        result = herald("gateway", "run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "discord could not start" in result.stderr and "Message Content Intent" in result.stderr


async def test_a_reply_still_in_the_outbox_at_shutdown_is_sent_once_after_the_restart(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Worth the wait."))
    fake = FakeDiscord()
    async with discord_gateway(home, emulator, emulator_url, fake, stream=False) as harness:
        fake.fail_next("POST /channels/*/messages", 429, retry_after=120)  # longer than a send may wait
        fake.dm_message(FRIEND, "hello?")
        await fake.wait_for(lambda: fake.calls_to("POST /channels/{channel_id}/messages"))
        outbox = harness.gateway.services.outbox

        async def postponed() -> bool:  # refused for two minutes: it waits in the outbox, not given up
            due = await outbox.next_attempt_at({"discord": None})
            return due is not None and due > time.time() + 60

        await wait_until_awaited(postponed, what="the reply postponed")
        assert await outbox.pending_count() == 1
    async with open_home_storage(home) as storage:  # two minutes pass
        await storage.write(lambda conn: conn.execute(sa.update(schema.outbox).values(next_attempt_at=0)))
    async with discord_gateway(home, emulator, emulator_url, fake) as harness:
        await harness.settled()
        answers = harness.texts(fake.dm_channel(FRIEND))
    assert answers == ["Worth the wait."] and len(emulator.requests) == 1


async def test_a_deferred_slash_command_is_answered_in_its_interaction_after_a_restart(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeDiscord()
    channel = fake.channel_id
    emulator.stall_next(30)  # the turn ahead of the command hangs until the shutdown cuts it off
    quick_drain = {"drain_timeout": 0.1}
    async with discord_gateway(home, emulator, emulator_url, fake, gateway=quick_drain) as harness:
        fake.guild_message(channel, FRIEND, "think hard", mention_bot=True, username="ada")
        await fake.wait_for(lambda: emulator.requests, what="the turn's model request")
        payload = fake.interaction("new", user_id=FRIEND, channel_id=channel, guild_id=fake.guild_id)
        iid = payload["id"]
        inbox = harness.gateway.services.inbox
        await wait_until_awaited(  # deferred, recorded and stored, waiting behind the turn
            lambda: inbox.find("discord", str(channel), iid), what="/new stored", describe=fake.describe
        )
    assert [r.kind for r in fake.interaction_responses(int(iid))] == ["callback"]  # only "thinking…"
    emulator.script(Reply(text="Thought it through."))
    async with discord_gateway(home, emulator, emulator_url, fake) as harness:  # a new process
        await harness.settled()
    responses = fake.interaction_responses(int(iid))
    assert [r.kind for r in responses] == ["callback", "edit_original"] and responses[1].ok
    with fake.lock:
        original = fake.interactions[int(iid)].original_message_id
    assert original is not None and fake.message(original).content.startswith("New session started")
    texts = harness.texts(channel)
    assert "Thought it through." in texts and sum(t.startswith("New session") for t in texts) == 1


async def test_insights_tables_arrive_in_code_blocks(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Discord shows Markdown in a proportional font: a table keeps its columns only in a code block."""
    fake = FakeDiscord()
    async with discord_gateway(home, emulator, emulator_url, fake) as harness:
        fake.dm_message(FRIEND, "Hello there")
        await harness.settled()
        interaction = fake.interaction("insights", user_id=FRIEND, channel_id=fake.dm_channel(FRIEND))
        await harness.settled()
        responses = fake.interaction_responses(int(interaction["id"]))
    [report] = [r.data["content"] for r in responses if "content" in r.data]
    blocks = report.split("```")
    assert len(blocks) == 5  # two tables, each between its fences
    assert blocks[1].lstrip("\n").startswith("session ") and "Hello there" in blocks[1]
    assert blocks[3].lstrip("\n").startswith("by purpose ")
