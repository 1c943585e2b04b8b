"""The fake Discord (REST + gateway), driven by the real discord.py over loopback.

Every assertion is on what discord.py observes (cached guilds, ``Message`` objects, raised errors)
or on what the fake recorded, so these tests also pin down the discord.py 2.7 behaviour the
Discord adapter relies on: what it calls at login, how it compresses and resumes, which 429s it
retries, how it encodes intents, allowed mentions and interaction responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import discord
import pytest
from discord import app_commands

from tests.fakes.discord import MESSAGE_CONTENT, FakeDiscord, WaitTimeout
from tests.fakes.discord.sessions import zstd_available
from tests.fakes.waiting import WAIT_TIMEOUT

ADA = 4242
BOB = 4343
READY_TIMEOUT = WAIT_TIMEOUT


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = FakeDiscord()
    async with server.serve():
        with server.patch_discord():
            yield server


class FastClient(discord.Client):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py sleeps 5 s before every IDENTIFY but the first; tests need not."""


def make_client(*, message_content: bool = True, **options: Any) -> discord.Client:
    intents = discord.Intents.default()
    intents.message_content = message_content
    # on_ready fires guild_ready_timeout (2 s by default) after the last GUILD_CREATE.
    return FastClient(intents=intents, guild_ready_timeout=0.05, **options)


@asynccontextmanager
async def running(fake: FakeDiscord, client: discord.Client) -> AsyncIterator[discord.Client]:
    """``login`` + ``connect`` in a task until ``on_ready``; closed (with a timeout) on exit."""
    await client.login(fake.token)
    connect = asyncio.create_task(client.connect(), name="discord-connect")
    ready = asyncio.create_task(client.wait_until_ready())
    try:
        await asyncio.wait({connect, ready}, timeout=READY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        if connect.done():
            connect.result()  # raises what connect() raised
            raise AssertionError("connect() returned before READY")
        if not ready.done():
            raise AssertionError(f"on_ready did not fire\n{fake.describe()}")
        yield client
    finally:
        ready.cancel()
        await asyncio.wait_for(client.close(), WAIT_TIMEOUT)
        with contextlib.suppress(asyncio.CancelledError, discord.DiscordException):
            await asyncio.wait_for(connect, WAIT_TIMEOUT)


class Inbox:
    """Collects ``on_message`` (and other) events of a client."""

    def __init__(self, client: discord.Client) -> None:
        self.messages: list[discord.Message] = []
        self.events: list[str] = []

        @client.event
        async def on_message(message: discord.Message) -> None:
            if message.author != client.user:
                self.messages.append(message)

        @client.event
        async def on_ready() -> None:
            self.events.append("ready")

        @client.event
        async def on_resumed() -> None:
            self.events.append("resumed")

    def ids(self) -> list[int]:
        return [m.id for m in self.messages]


# --- login, READY, GUILD_CREATE ----------------------------------------------------------------------


async def test_login_ready_and_guild_cache(fake: FakeDiscord) -> None:
    thread_id = fake.add_thread(fake.channel_id, "support")
    client = make_client()
    async with running(fake, client):
        assert client.user is not None and client.user.id == fake.bot_id and client.user.bot
        assert client.application_id == fake.application_id
        guild = client.get_guild(fake.guild_id)
        assert guild is not None and not guild.unavailable
        assert guild.me is not None and guild.me.id == fake.bot_id
        channel = client.get_channel(fake.channel_id)
        assert isinstance(channel, discord.TextChannel) and channel.name == "general"
        thread = guild.get_thread(thread_id)
        assert thread is not None and thread.parent_id == fake.channel_id

    # What discord.py 2.7 does at start: two REST calls, then one websocket (no GET /gateway).
    assert [(c.method, c.path) for c in fake.calls] == [
        ("GET", "/users/@me"),
        ("GET", "/oauth2/applications/@me"),
    ]
    first = fake.connections[0]
    assert first.path == "/gateway"
    # zlib-stream, or zstd-stream when zstandard (or Python 3.14's compression.zstd) is importable.
    compress = "zstd-stream" if zstd_available() else "zlib-stream"
    assert first.query == {"v": "10", "encoding": "json", "compress": compress}
    assert compress == discord.utils._ActiveDecompressionContext.COMPRESSION_TYPE
    assert first.op == "identify" and first.received_ops[:2] == [1, 2]  # a heartbeat comes before IDENTIFY
    identify = fake.identify_payloads[0]
    assert identify["token"] == fake.token and identify["compress"] is True
    assert identify["intents"] == client.intents.value and identify["intents"] & MESSAGE_CONTENT
    # client.close() reaches the server as close code 4000 (aiohttp race in discord.py), not 1000.
    assert first.closed_by == "client" and first.close_code in (1000, 4000)


async def test_every_answer_is_exactly_json(fake: FakeDiscord) -> None:
    headers = {"Authorization": f"Bot {fake.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fake.rest_url}/users/@me", headers=headers) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
        async with http.get(f"{fake.rest_url}/nope", headers=headers) as resp:
            assert resp.status == 404 and resp.headers["Content-Type"] == "application/json"
            assert await resp.json() == {"message": "404: Not Found", "code": 0}
        async with http.get(f"{fake.rest_url}/users/@me") as resp:
            assert resp.status == 401 and (await resp.json())["message"] == "401: Unauthorized"
        async with http.get(f"{fake.rest_url}/gateway/bot", headers=headers) as resp:
            assert (await resp.json())["url"] == fake.gateway_url


async def test_bad_token_is_a_login_failure(fake: FakeDiscord) -> None:
    client = make_client()
    with pytest.raises(discord.LoginFailure):
        await client.login("WRONG.TOKEN")
    await client.close()


# --- inbound messages ----------------------------------------------------------------------------


async def test_dm_and_guild_messages_reach_on_message(fake: FakeDiscord) -> None:
    client = make_client()
    inbox = Inbox(client)
    async with running(fake, client):
        dm = fake.dm_message(ADA, "hello in private", username="ada")
        plain = fake.guild_message(fake.channel_id, BOB, "chatter", username="bob")
        mention = fake.guild_message(fake.channel_id, BOB, "what time is it?", mention_bot=True)
        await fake.wait_for(lambda: len(inbox.messages) == 3, what="three messages")
        bot_msg = await client.get_partial_messageable(fake.channel_id).send("It is noon.")
        reply = fake.guild_message(fake.channel_id, BOB, "thanks", reply_to_bot_message_id=bot_msg.id)
        await fake.wait_for(lambda: len(inbox.messages) == 4, what="the reply")

    first, second, third, fourth = inbox.messages
    assert isinstance(first.channel, discord.DMChannel) and first.guild is None
    assert first.id == int(dm["id"]) and first.content == "hello in private"
    assert (first.author.id, first.author.name) == (ADA, "ada")
    assert isinstance(second.channel, discord.TextChannel) and second.channel.id == fake.channel_id
    assert isinstance(second.author, discord.Member) and second.author.name == "bob"
    assert second.id == int(plain["id"]) and second.mentions == []
    assert client.user is not None
    assert third.content == f"<@{fake.bot_id}> what time is it?" and client.user.mentioned_in(third)
    assert third.id == int(mention["id"])
    assert fourth.id == int(reply["id"]) and fourth.type is discord.MessageType.reply
    assert fourth.reference is not None and fourth.reference.message_id == bot_msg.id
    resolved = fourth.reference.resolved
    assert isinstance(resolved, discord.Message) and resolved.author.id == fake.bot_id
    assert client.user in fourth.mentions  # Discord's default reply ping


async def test_without_message_content_intent_guild_text_is_empty(fake: FakeDiscord) -> None:
    client = make_client(message_content=False)
    inbox = Inbox(client)
    async with running(fake, client):
        fake.guild_message(fake.channel_id, BOB, "secret chatter")
        fake.guild_message(fake.channel_id, BOB, "hey bot", mention_bot=True)
        fake.dm_message(ADA, "private words")
        await fake.wait_for(lambda: len(inbox.messages) == 3)
    assert [m.content for m in inbox.messages] == ["", f"<@{fake.bot_id}> hey bot", "private words"]
    assert not fake.identify_payloads[0]["intents"] & MESSAGE_CONTENT


async def test_thread_messages_carry_the_thread(fake: FakeDiscord) -> None:
    thread_id = fake.add_thread(fake.channel_id, "long task")
    client = make_client()
    inbox = Inbox(client)
    async with running(fake, client):
        fake.guild_message(fake.channel_id, BOB, "in the thread", thread_id=thread_id)
        await fake.wait_for(lambda: inbox.messages)
        message = inbox.messages[0]
        assert isinstance(message.channel, discord.Thread)
        assert message.channel.id == thread_id and message.channel.parent_id == fake.channel_id
        await message.channel.send("answer in thread")
    assert [m.content for m in fake.messages(thread_id)] == ["answer in thread"]
    assert fake.messages(fake.channel_id) == []


async def test_attachments_both_ways(fake: FakeDiscord) -> None:
    client = make_client()
    inbox = Inbox(client)
    async with running(fake, client):
        fake.dm_message(ADA, "see file", files={"notes.txt": b"hello file"})
        await fake.wait_for(lambda: inbox.messages)
        attachment = inbox.messages[0].attachments[0]
        assert attachment.filename == "notes.txt" and await attachment.read() == b"hello file"
        channel = client.get_partial_messageable(fake.channel_id)
        await channel.send("report", file=discord.File(__file__, filename="report.py"))
    sent = fake.messages(fake.channel_id)[0]
    assert sent.content == "report" and sent.attachments[0].filename == "report.py"
    assert sent.attachments[0].data.startswith(b'"""The fake Discord')


# --- sending -------------------------------------------------------------------------------------


async def test_send_edit_delete_typing(fake: FakeDiscord) -> None:
    client = make_client()
    async with running(fake, client):
        channel = client.get_channel(fake.channel_id)
        assert isinstance(channel, discord.TextChannel)
        safe = await channel.send("@everyone look", allowed_mentions=discord.AllowedMentions.none())
        loud = await channel.send(f"@everyone and <@{BOB}>")
        await safe.edit(content="@everyone look (edited)")
        await loud.delete()
        async with channel.typing():
            pass

    first, second = fake.messages(fake.channel_id)
    assert first.allowed_mentions == {"parse": []} and first.mention_everyone is False
    assert first.content == "@everyone look (edited)" and first.versions == ("@everyone look", first.content)
    assert first.edited and not first.deleted
    # Without allowed_mentions nothing is sent, and Discord pings everyone the content names.
    assert second.allowed_mentions is None and second.mention_everyone is True
    assert second.deleted and [d.message_id for d in fake.deleted] == [second.message_id]
    assert fake.messages(fake.channel_id, include_deleted=False) == [fake.messages(fake.channel_id)[0]]
    assert fake.typing(fake.channel_id) == 1
    post = fake.calls_to("POST /channels/{channel_id}/messages")[0]
    assert post.json["enforce_nonce"] is True and post.json["nonce"]  # discord.py 2.7 sends a nonce


async def test_reply_records_message_reference(fake: FakeDiscord) -> None:
    client = make_client()
    inbox = Inbox(client)
    async with running(fake, client):
        fake.guild_message(fake.channel_id, BOB, "question")
        await fake.wait_for(lambda: inbox.messages)
        await inbox.messages[0].reply("answer", mention_author=False)
    sent = fake.messages(fake.channel_id)[0]
    assert sent.reply_to == inbox.messages[0].id
    # mention_author alone sends AllowedMentions() defaults: everyone/users/roles may all ping.
    assert sent.allowed_mentions == {"parse": ["everyone", "users", "roles"], "replied_user": False}
    assert BOB not in sent.mentions


async def test_validation_errors(fake: FakeDiscord) -> None:
    client = make_client()
    async with running(fake, client):
        channel = client.get_partial_messageable(fake.channel_id)
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x" * 2001)
        await channel.send("x" * 2000)
        with pytest.raises(discord.HTTPException) as empty:
            await channel.send(content="")
        with pytest.raises(discord.NotFound) as unknown:
            await client.get_partial_messageable(12345).send("nowhere")
    assert (too_long.value.status, too_long.value.code) == (400, 50035)
    assert "content" in too_long.value.text and "2000 or fewer" in too_long.value.text
    assert (empty.value.status, empty.value.code) == (400, 50006)
    assert unknown.value.code == 10003
    assert [m.content for m in fake.messages(fake.channel_id)] == ["x" * 2000]


# --- faults --------------------------------------------------------------------------------------


async def test_429_with_via_is_retried(fake: FakeDiscord) -> None:
    client = make_client()
    async with running(fake, client):
        fake.fail_next("POST /channels/{channel_id}/messages", 429, retry_after=0.05, count=2)
        started = time.monotonic()
        sent = await client.get_partial_messageable(fake.channel_id).send("after the limit")
        waited = time.monotonic() - started
        fake.fail_next("POST", 429, retry_after=0.05, global_=True)  # blocks every route meanwhile
        await client.get_partial_messageable(fake.channel_id).send("after the global limit")
    assert sent.content == "after the limit" and waited >= 0.1
    statuses = [c.status for c in fake.calls_to("POST /channels/*/messages")]
    assert statuses == [429, 429, 200, 429, 200]
    rate_limited = fake.calls_to("POST /channels/*/messages")[0].response
    assert rate_limited == {"message": "You are being rate limited.", "retry_after": 0.05, "global": False}
    contents = [m.content for m in fake.messages(fake.channel_id)]
    assert contents == ["after the limit", "after the global limit"]


async def test_five_429s_lose_the_send(fake: FakeDiscord) -> None:
    client = make_client()
    async with running(fake, client):
        fake.fail_next("POST", 429, retry_after=0.01, count=5)
        with pytest.raises(discord.HTTPException) as failed:
            await client.get_partial_messageable(fake.channel_id).send("lost")
    assert failed.value.status == 429
    assert len(fake.calls_to("POST /channels/*/messages")) == 5 and fake.messages(fake.channel_id) == []


async def test_forbidden_and_server_errors(fake: FakeDiscord) -> None:
    client = make_client()
    async with running(fake, client):
        channel = client.get_partial_messageable(fake.channel_id)
        fake.fail_next("/channels/{channel_id}/messages", 403)
        with pytest.raises(discord.Forbidden) as forbidden:
            await channel.send("denied")
        fake.forbid_channel(fake.channel_id, code=50001)
        with pytest.raises(discord.Forbidden) as no_access:
            await channel.send("denied again")
        fake.allow_channel(fake.channel_id)
        fake.fail_next("POST /channels/*/messages", 500)
        await channel.send("after a 500")  # discord.py retries 500 once after 1 s
        fake.fail_network_next("POST")
        with pytest.raises(aiohttp.ClientError):
            await channel.send("dropped")
    assert (forbidden.value.code, forbidden.value.text) == (50013, "Missing Permissions")
    assert no_access.value.code == 50001
    assert [m.content for m in fake.messages(fake.channel_id)] == ["after a 500"]


async def test_missing_privileged_intent_closes_4014() -> None:
    fake = FakeDiscord(enabled_privileged_intents=())
    async with fake.serve():
        with fake.patch_discord():
            client = make_client()
            with pytest.raises(discord.PrivilegedIntentsRequired):
                async with running(fake, client):
                    pass
    assert fake.connections[0].close_code == 4014 and fake.connections[0].closed_by == "fake"
    assert client.application is not None and not client.application.flags.gateway_message_content_limited


# --- reconnects ----------------------------------------------------------------------------------


async def test_resume_replays_missed_events(fake: FakeDiscord) -> None:
    client = make_client()
    inbox = Inbox(client)
    async with running(fake, client):
        first = fake.guild_message(fake.channel_id, BOB, "before")
        await fake.wait_for(lambda: len(inbox.messages) == 1)
        assert fake.force_reconnect(resume=True) == 1
        missed = fake.guild_message(fake.channel_id, BOB, "while reconnecting")
        await fake.wait_for(lambda: "resumed" in inbox.events and len(inbox.messages) == 2)
        again = fake.replay(int(first["id"]))
        await fake.wait_for(lambda: len(inbox.messages) == 3)

    assert inbox.ids() == [int(first["id"]), int(missed["id"]), int(again["id"])]
    assert again["id"] == first["id"]  # the same message, delivered twice
    assert inbox.events == ["ready", "resumed"]
    fresh, resumed = fake.connections[:2]
    assert (fresh.path, fresh.op, fresh.close_code) == ("/gateway", "identify", 4000)
    assert (resumed.path, resumed.op, resumed.session_id) == ("/resume", "resume", fresh.session_id)
    assert fake.resume_payloads[0]["session_id"] == fresh.session_id
    assert len(fake.identify_payloads) == 1


async def test_invalid_session_makes_a_fresh_identify(fake: FakeDiscord) -> None:
    client = make_client()
    inbox = Inbox(client)
    async with running(fake, client):
        fake.force_reconnect(resume=False)
        await fake.wait_for(lambda: inbox.events.count("ready") == 2, what="a second on_ready")
        fake.invalidate_sessions()
        fake.force_reconnect(resume=True, code=4000)  # RESUME is refused with op 9
        await fake.wait_for(lambda: inbox.events.count("ready") == 3, what="a third on_ready")
    assert len(fake.identify_payloads) == 3
    ops = [(c.path, c.op) for c in fake.connections]
    # After a refused RESUME, discord.py 2.7 identifies again at the resume URL it last used
    # (ws_params keeps "gateway"); only op 9 on a live socket sends it back to DEFAULT_GATEWAY.
    assert ops == [
        ("/gateway", "identify"),
        ("/gateway", "identify"),
        ("/resume", "resume"),
        ("/resume", "identify"),
    ]


async def test_silent_gateway_is_a_zombie_after_heartbeat_timeout(fake: FakeDiscord) -> None:
    fake.heartbeat_interval_ms = 100
    client = make_client(heartbeat_timeout=0.5)
    inbox = Inbox(client)
    async with running(fake, client):
        fake.ack_heartbeats = False  # discord.py ignores missing ACKs; only silence counts
        await fake.wait_for(lambda: "resumed" in inbox.events, what="a resume after silence")
        fake.ack_heartbeats = True
        sent = fake.dm_message(ADA, "still there?")
        await fake.wait_for(lambda: inbox.ids() == [int(sent["id"])])
    assert fake.connections[0].closed_by == "client" and fake.connections[1].op == "resume"


async def test_world_changes_while_connected(fake: FakeDiscord) -> None:
    client = make_client()
    async with running(fake, client):
        channel_id = fake.add_text_channel(fake.guild_id, "random")
        thread_id = fake.add_thread(channel_id, "side topic", private=True)
        guild_id = fake.add_guild("Second Server")
        await fake.wait_for(lambda: client.get_guild(guild_id) and client.get_channel(thread_id))
        channel = client.get_channel(channel_id)
        thread = client.get_channel(thread_id)
        assert isinstance(channel, discord.TextChannel) and channel.name == "random"
        assert isinstance(thread, discord.Thread) and thread.type is discord.ChannelType.private_thread
        second = client.get_guild(guild_id)
        assert second is not None and second.name == "Second Server" and second.me is not None


# --- slash commands and interactions ----------------------------------------------------------------


async def test_slash_command_sync_and_ephemeral_answer(fake: FakeDiscord) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)
    questions: list[str] = []

    @tree.command(name="ask", description="Ask the agent")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        questions.append(question)
        await interaction.response.send_message(f"thinking about {question}", ephemeral=True)

    async with running(fake, client):
        synced = await tree.sync()
        assert [c.name for c in synced] == ["ask"]
        payload = fake.interaction("ask", {"question": "why?"}, user_id=ADA, channel_id=fake.channel_id)
        interaction_id = int(payload["id"])
        responses = await fake.wait_for(lambda: fake.interaction_responses(interaction_id))

    assert len(fake.command_syncs) == 1 and fake.command_syncs[0].guild_id is None
    assert fake.command_syncs[0].commands[0]["name"] == "ask"
    assert fake.commands()[0]["id"] == str(synced[0].id)
    assert questions == ["why?"]
    (response,) = responses
    assert (response.kind, response.type, response.flags, response.ephemeral) == ("callback", 4, 64, True)
    (message,) = fake.messages(fake.channel_id)
    assert message.ephemeral and message.interaction_id == interaction_id
    assert not any(
        d.event == "MESSAGE_CREATE" and d.data["id"] == str(message.message_id) for d in fake.dispatches
    )


async def test_deferred_answer_then_followup_in_dm(fake: FakeDiscord) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)

    @tree.command(name="work", description="Long work")
    async def work(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.followup.send("done")
        await interaction.edit_original_response(content="done (edited)")
        await interaction.followup.send("one more thing")

    async with running(fake, client):
        await tree.sync()
        payload = fake.interaction("work", user_id=ADA)  # in the DM with the bot
        iid = int(payload["id"])
        await fake.wait_for(lambda: len(fake.interaction_responses(iid)) == 4)
    kinds = [(r.kind, r.type, r.status) for r in fake.interaction_responses(iid)]
    assert kinds == [
        ("callback", 5, 200),
        ("followup", None, 200),
        ("edit_original", None, 200),
        ("followup", None, 200),
    ]
    dm = fake.dm_channel(ADA)
    assert [m.content for m in fake.messages(dm)] == ["done (edited)", "one more thing"]


async def test_interactions_must_be_answered_once_and_in_time(fake: FakeDiscord) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)
    errors: list[discord.HTTPException] = []

    @tree.command(name="slow", description="Too slow")
    async def slow(interaction: discord.Interaction) -> None:
        await asyncio.sleep(0.3)
        try:
            await interaction.response.send_message("late")
        except discord.HTTPException as exc:
            errors.append(exc)

    async with running(fake, client):
        await tree.sync()
        fake.interaction_deadline = 0.2
        late = fake.interaction("slow", user_id=ADA, channel_id=fake.channel_id)
        await fake.wait_for(lambda: errors, what="the late answer to fail")
        fake.interaction_deadline = 3.0
        # Someone else (another process, a retry) answers first: discord.py's own answer is refused.
        taken = fake.interaction("slow", user_id=ADA, channel_id=fake.channel_id)
        url = f"{fake.rest_url}/interactions/{taken['id']}/{taken['token']}/callback"
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, json={"type": 4, "data": {"content": "first"}}) as resp,
        ):
            assert resp.status == 204  # without ?with_response there is no body
        await fake.wait_for(lambda: len(errors) == 2, what="the second answer to fail")
    assert isinstance(errors[0], discord.NotFound) and errors[0].code == 10062
    assert errors[1].status == 400 and errors[1].code == 40060
    assert [r.status for r in fake.interaction_responses(int(late["id"]))] == [404]
    assert [r.status for r in fake.interaction_responses(int(taken["id"]))] == [204, 400]
    assert [m.content for m in fake.messages(fake.channel_id)] == ["first"]


async def test_guild_command_sync_and_options(fake: FakeDiscord) -> None:
    client = make_client()
    tree = app_commands.CommandTree(client)
    guild = discord.Object(fake.guild_id)
    seen: list[tuple[int, discord.Member | discord.User]] = []

    @tree.command(name="remind", description="Remind someone", guild=guild)
    async def remind(interaction: discord.Interaction, minutes: int, who: discord.Member) -> None:
        seen.append((minutes, who))
        await interaction.response.send_message("ok")

    memory = app_commands.Group(name="memory", description="Memory tools", guild_ids=[fake.guild_id])
    forgotten: list[str] = []

    @memory.command(name="forget", description="Forget a key")
    async def forget(interaction: discord.Interaction, key: str) -> None:
        forgotten.append(key)
        await interaction.response.defer(ephemeral=True, thinking=True)
        await interaction.followup.send(f"forgot {key}")

    tree.add_command(memory)
    async with running(fake, client):
        await tree.sync(guild=guild)
        fake.interaction("remind", {"minutes": 5, "who": BOB}, user_id=ADA, channel_id=fake.channel_id)
        fake.interaction("memory forget", {"key": "pets"}, user_id=ADA, channel_id=fake.channel_id)
        await fake.wait_for(lambda: seen and len(fake.messages(fake.channel_id)) == 2)
    assert fake.command_syncs[0].guild_id == fake.guild_id
    assert [c["name"] for c in fake.commands(fake.guild_id)] == ["remind", "memory"] and not fake.commands()
    minutes, who = seen[0]
    assert minutes == 5 and who.id == BOB
    assert forgotten == ["pets"]
    ok, forgot = sorted(fake.messages(fake.channel_id), key=lambda m: m.content != "ok")
    assert ok.content == "ok" and not ok.ephemeral
    # The followup filled the ephemeral "thinking" message: not a new message, not "edited".
    assert forgot.content == "forgot pets" and forgot.ephemeral and not forgot.edited


# --- harness -------------------------------------------------------------------------------------


async def test_wait_for_times_out_with_a_description(fake: FakeDiscord) -> None:
    with pytest.raises(WaitTimeout) as timeout:
        await fake.wait_for(lambda: fake.messages(fake.channel_id), timeout=0.05, what="a bot message")
    assert "a bot message" in str(timeout.value) and "REST calls" in str(timeout.value)


async def test_shutdown_with_a_connected_client_is_prompt() -> None:
    fake = FakeDiscord()
    client = make_client()
    async with fake.serve():
        with fake.patch_discord():
            await client.login(fake.token)
            connect = asyncio.create_task(client.connect(reconnect=False))
            await asyncio.wait_for(client.wait_until_ready(), READY_TIMEOUT)
    # Told to go away (1001), discord.py tries to RESUME even with reconnect=False, finds the port
    # closed and connect() raises the connection error.
    with pytest.raises(aiohttp.ClientConnectorError):
        await asyncio.wait_for(connect, WAIT_TIMEOUT)
    await asyncio.wait_for(client.close(), WAIT_TIMEOUT)
    assert [c.close_code for c in fake.connections] == [1001]


def test_serve_in_thread_for_sync_callers() -> None:
    fake = FakeDiscord()
    with fake.serve_in_thread() as urls:
        assert urls.rest == fake.rest_url and urls.gateway.endswith("/gateway")
        with urllib.request.urlopen(f"{urls.rest}/gateway", timeout=WAIT_TIMEOUT) as resp:
            assert resp.headers["Content-Type"] == "application/json"
        fake.wait_for_sync(lambda: fake.calls)
    assert [c.path for c in fake.calls] == ["/gateway"]
