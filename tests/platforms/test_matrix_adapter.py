"""What is Matrix's own, beyond the conformance suite: the sync token kept only after the inbox stored
a batch (a restart neither replays nor loses), invites accepted from allowed people only, encrypted
rooms refused out loud, replies and commands in rooms, voice and size limits, 429s. Through the real
mautrix against the fake homeserver (``tests/fakes/matrix``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.base import (
    Attachment,
    ChatAddress,
    ChatType,
    CommandSpec,
    DeliveryError,
    InboundMessage,
    OutboundText,
    SinkUnavailable,
)
from adapters.matrix.adapter import ENCRYPTED_NOTICE, TOKEN_KEY, MatrixAdapter
from adapters.matrix.inbound import since_invited
from adapters.matrix.settings import RECORDS, MatrixSettings
from adapters.matrix.spec import SPEC
from adapters.records import MemoryRecordStore
from adapters.spec import BuildContext
from tests.fakes.matrix import BOT, SERVER, FakeMatrix
from tests.fakes.waiting import wait_until

FRIEND, STRANGER, OTHER = f"@friend:{SERVER}", f"@stranger:{SERVER}", f"@other:{SERVER}"


class Inbox:
    """A sink that keeps what it was handed (and, each time, the sync token kept at that moment)."""

    def __init__(self, records: MemoryRecordStore, failures: int = 0) -> None:
        self.records = records
        self.failures = failures
        self.batches: list[list[InboundMessage]] = []
        self.tokens_seen: list[str | None] = []

    async def __call__(self, batch: Sequence[InboundMessage]) -> None:
        record = await self.records.get(TOKEN_KEY)
        self.tokens_seen.append(record.value["next_batch"] if record else None)
        if self.failures:
            self.failures -= 1
            raise SinkUnavailable("the database is away")
        self.batches.append(list(batch))

    @property
    def texts(self) -> list[str]:
        return [message.text for batch in self.batches for message in batch]

    @property
    def messages(self) -> list[InboundMessage]:
        return [message for batch in self.batches for message in batch]


def world() -> FakeMatrix:
    fake = FakeMatrix()
    for user in (FRIEND, STRANGER, OTHER):
        fake.add_user(user, user[1:].split(":")[0].title())
    return fake


@asynccontextmanager
async def adapter_on(fake: FakeMatrix, inbox: Inbox, **options: Any) -> AsyncIterator[MatrixAdapter]:
    adapter = MatrixAdapter(
        fake.url, fake.token, records=inbox.records, invite_from={FRIEND}, retry_base=0.01, retry_cap=0.05,
        sync_wait=5.0, **options,
    )  # fmt: skip
    await adapter.start(inbox)
    try:
        yield adapter
    finally:
        await adapter.stop()


def text(body: str, **content: Any) -> dict[str, Any]:
    return {"msgtype": "m.text", "body": body, **content}


async def test_the_sync_token_is_kept_only_after_the_batch_is_stored() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    inbox = Inbox(records, failures=2)  # the gateway's database is away twice
    async with fake.serve(), adapter_on(fake, inbox):
        before = (await records.get(TOKEN_KEY)).value["next_batch"]  # type: ignore[union-attr]
        room = fake.direct_room(FRIEND)
        fake.message(room, FRIEND, text("are you there?"))
        await wait_until(lambda: inbox.batches, what="the batch stored")
        await wait_until(lambda: not fake.pending(), what="the batch confirmed")
        after = (await records.get(TOKEN_KEY)).value["next_batch"]  # type: ignore[union-attr]
    assert inbox.texts == ["are you there?"]  # handed over again until stored, then once
    assert inbox.tokens_seen == [before, before, before]  # not kept while the sink failed
    assert after != before


async def test_a_restart_neither_replays_nor_loses_and_history_before_the_first_start_is_not_answered() -> (
    None
):
    fake, records = world(), MemoryRecordStore(RECORDS)
    room = fake.direct_room(FRIEND)
    fake.message(room, FRIEND, text("written before the bot ever ran"))
    async with fake.serve():
        first = Inbox(records)
        async with adapter_on(fake, first):
            fake.message(room, FRIEND, text("one"))
            await wait_until(lambda: first.texts == ["one"] and not fake.pending(), what="one stored")
        fake.message(room, FRIEND, text("two, while the bot was away"))
        second = Inbox(records)
        async with adapter_on(fake, second):
            fake.message(room, FRIEND, text("three"))
            await wait_until(lambda: len(second.texts) == 2 and not fake.pending(), what="two and three")
    assert first.texts == ["one"]
    assert second.texts == ["two, while the bot was away", "three"]


async def test_a_cut_timeline_is_filled_so_nothing_is_lost() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    room = fake.direct_room(FRIEND)
    async with fake.serve():
        async with adapter_on(fake, Inbox(records)):
            pass
        for n in range(120):  # more than a sync's timeline holds (50)
            fake.message(room, FRIEND, text(f"message {n}"))
        inbox = Inbox(records)
        async with adapter_on(fake, inbox):
            await wait_until(lambda: len(inbox.texts) >= 120 and not fake.pending(), what="all 120")
    assert inbox.texts == [f"message {n}" for n in range(120)]


async def test_a_room_s_history_from_before_the_invite_is_not_handed_over_what_came_after_it_is() -> None:
    """Joined, a room shows its recent history (Synapse does; the fake too): written before the bot
    was asked in, it is not for the bot, not even a mention of it. A direct chat's first words, typed
    before the bot joined, are."""
    fake, records = world(), MemoryRecordStore(RECORDS)
    async with fake.serve():
        async with adapter_on(fake, Inbox(records)):
            pass  # the bot has run: it has a sync token
        room = fake.create_room([FRIEND, OTHER], bot=False)
        fake.message(room, FRIEND, text("an old question for Herald", **{"m.mentions": {"user_ids": [BOT]}}))
        fake.message(room, OTHER, text("old chatter"))
        fake.invite(FRIEND, room_id=room)
        fake.message(room, FRIEND, text("welcome, Herald", **{"m.mentions": {"user_ids": [BOT]}}))
        inbox = Inbox(records)
        async with adapter_on(fake, inbox):
            await wait_until(lambda: inbox.texts and not fake.pending(), what="the room's news")
    assert inbox.texts == ["welcome, Herald"]


def test_since_invited_keeps_what_came_after_the_bot_s_latest_invite() -> None:
    def member(user: str, membership: str) -> dict[str, Any]:
        return {"type": "m.room.member", "state_key": user, "content": {"membership": membership}}

    old, new = {"type": "m.room.message", "body": "old"}, {"type": "m.room.message", "body": "new"}
    assert since_invited([old, member(BOT, "invite"), new], BOT) == [new]
    assert since_invited([member(BOT, "invite"), old, member(BOT, "invite"), new], BOT) == [new]
    assert since_invited([old, member(FRIEND, "invite"), new], BOT) == [old, member(FRIEND, "invite"), new]
    assert since_invited([old, member(BOT, "join"), new], BOT) == [old, member(BOT, "join"), new]


async def test_invites_are_accepted_from_allowed_people_only() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    inbox = Inbox(records)
    async with fake.serve(), adapter_on(fake, inbox):
        strangers = fake.invite(STRANGER)
        friends = fake.invite(FRIEND)
        await wait_until(
            lambda: fake.rooms[friends].members[BOT] == "join", what="the friend's invite accepted"
        )
        await wait_until(
            lambda: fake.rooms[strangers].members[BOT] == "leave", what="the stranger's declined"
        )
        fake.message(strangers, STRANGER, text("hello bot"))  # the bot is not there to read it
        fake.message(friends, FRIEND, text("thanks for joining"))
        await wait_until(lambda: inbox.texts and not fake.pending(), what="the friend's message")
    assert inbox.texts == ["thanks for joining"]
    assert fake.bot_events(strangers) == [
        e for e in fake.bot_events(strangers) if e["type"] == "m.room.member"
    ]
    assert fake.rooms[strangers].leave_reasons == ["Not allowed to use this bot."]  # declined, nothing said


async def test_an_invite_that_cannot_be_joined_does_not_hold_up_what_comes_after_it() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    inbox = Inbox(records)
    async with fake.serve(), adapter_on(fake, inbox):
        fake.fail_next("join", 1000, status=403)  # withdrawn before the bot got to it
        fake.invite(FRIEND)
        fake.message(fake.direct_room(FRIEND), FRIEND, text("still there?"))
        await wait_until(lambda: inbox.texts and not fake.pending(), what="the message after the invite")
    assert inbox.texts == ["still there?"]


async def test_in_an_encrypted_room_the_bot_says_it_cannot_read_it_and_leaves() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    inbox = Inbox(records)
    async with fake.serve(), adapter_on(fake, inbox):
        invited = fake.invite(FRIEND, encrypted=True)
        shared = fake.create_room([FRIEND, OTHER])
        fake.turn_on_encryption(shared, FRIEND)  # encryption turned on later in a room the bot is in
        rooms = (invited, shared)
        await wait_until(lambda: all(fake.rooms[r].members[BOT] == "leave" for r in rooms), what="both left")
    for room in (invited, shared):
        notices = [e["content"] for e in fake.bot_events(room) if e["type"] == "m.room.message"]
        assert notices == [{"msgtype": "m.notice", "body": ENCRYPTED_NOTICE, "m.mentions": {}}]
    assert inbox.messages == []


async def test_in_a_room_a_reply_to_the_bot_or_a_command_is_addressed_and_other_talk_is_not() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    inbox = Inbox(records)
    room = fake.create_room([FRIEND, OTHER])
    async with fake.serve(), adapter_on(fake, inbox) as adapter:
        await adapter.set_commands([CommandSpec("help", "What the bot can do")])
        mine = await adapter.send(ChatAddress("matrix", room), OutboundText("**Done.**"))
        fake.message(room, FRIEND, text("just chatting"))
        fake.message(room, FRIEND, text("> <@herald:herald.test> Done.\n\nwhy?", **{
            "m.relates_to": {"m.in_reply_to": {"event_id": mine}}, "m.mentions": {}}))  # fmt: skip
        fake.message(room, OTHER, text("/help"))
        fake.message(room, OTHER, text("hey Herald, look"))  # an old client: mentions by name, no m.mentions
        await wait_until(lambda: len(inbox.messages) == 4 and not fake.pending(), what="four messages")
    said = {message.text: message for message in inbox.messages}
    assert [said[t].addressed for t in ("just chatting", "why?", "/help", "hey Herald, look")] == [
        False, True, True, True]  # fmt: skip
    assert said["why?"].reply_to_id == mine and said["why?"].chat_type is ChatType.GROUP
    assert said["/help"].user_name == "Other"


async def test_a_voice_message_is_read_and_a_file_past_the_limit_is_refused() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    inbox = Inbox(records)
    room = fake.direct_room(FRIEND)
    ogg = b"OggS" + bytes(5000)
    url = fake.upload(ogg, "audio/ogg", "voice.ogg")
    async with fake.serve(), adapter_on(fake, inbox) as adapter:
        info = {"mimetype": "audio/ogg", "size": len(ogg)}
        voice_note = {"msgtype": "m.audio", "body": "voice.ogg", "url": url, "info": info}
        voice_note["org.matrix.msc3245.voice"] = {}
        fake.message(room, FRIEND, voice_note)
        await wait_until(lambda: inbox.messages and not fake.pending(), what="the voice message")
        [message] = inbox.messages
        [voice] = message.attachments
        data = await adapter.download(voice, max_bytes=10_000)
        with pytest.raises(DeliveryError) as refused:
            await adapter.download(Attachment("voice", url, name="voice.ogg"), max_bytes=1000)  # size unsaid
    assert (voice.kind, voice.mime_type, message.text) == ("voice", "audio/ogg", "")
    assert data == ogg
    assert refused.value.permanent


async def test_a_429_gives_the_wait_the_homeserver_asked_for_to_the_gateway() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    room = fake.direct_room(FRIEND)
    async with fake.serve(), adapter_on(fake, Inbox(records)) as adapter:
        fake.fail_next("send", retry_after=2.5)
        with pytest.raises(DeliveryError) as limited:
            await adapter.send(ChatAddress("matrix", room), OutboundText("hello"))
        sent = await adapter.send(ChatAddress("matrix", room), OutboundText("hello"))
        await adapter.typing(ChatAddress("matrix", room))
    assert fake.typing == [room]
    assert limited.value.retryable and limited.value.retry_after == 2.5
    assert [e["event_id"] for e in fake.bot_events(room) if e["type"] == "m.room.message"] == [sent]


async def test_a_refused_token_stops_the_start_with_what_to_do() -> None:
    fake, records = world(), MemoryRecordStore(RECORDS)
    async with fake.serve():
        adapter = MatrixAdapter(fake.url, "syt_wrong", records=records)
        with pytest.raises(DeliveryError) as refused:
            await adapter.start(Inbox(records))
    assert not refused.value.retryable and "MATRIX_ACCESS_TOKEN" in str(refused.value)


async def test_the_gateways_admins_may_invite_the_bot_as_built_from_its_spec() -> None:
    boss = f"@boss:{SERVER}"
    fake = world()
    fake.add_user(boss, "Boss")
    async with fake.serve():
        settings = MatrixSettings(homeserver=fake.url)
        secrets = {SPEC.token.env: fake.token}
        context = BuildContext(settings, secrets, None, frozenset(), admins=frozenset({boss}))
        adapter = SPEC.build(context)
        records = MemoryRecordStore(RECORDS)
        await adapter.start(Inbox(records))
        try:
            room = fake.invite(boss)
            await wait_until(lambda: fake.rooms[room].members[BOT] == "join", what="admin invite accepted")
        finally:
            await adapter.stop()


def test_matrix_without_a_homeserver_is_refused_in_one_sentence() -> None:
    context = BuildContext(MatrixSettings(), {SPEC.token.env: "syt_x"}, None, frozenset())
    with pytest.raises(ValueError, match=r"matrix\.homeserver"):
        SPEC.build(context)


async def test_only_the_elected_process_syncs_and_sending_goes_on_without_syncing() -> None:
    """In a cluster the gateway starts the adapter with ``receive=False`` and lets the process holding
    the lease sync (``allowed`` is asked before each sync): no sync while it says no, sends meanwhile;
    once elected it goes on from the token the previous syncing process kept."""
    fake, records = world(), MemoryRecordStore(RECORDS)
    room = fake.direct_room(FRIEND)
    elected, asked = False, 0
    inbox = Inbox(records)

    def allowed() -> bool:
        nonlocal asked
        asked += 1
        return elected

    async with fake.serve() as url:
        async with adapter_on(fake, Inbox(records)):  # the process that synced before
            pass
        syncs_before = len(fake.calls_to("GET", "/sync"))
        adapter = MatrixAdapter(url, fake.token, records=records, retry_base=0.01, sync_wait=5.0)
        await adapter.start(inbox, receive=False)
        try:
            await adapter.send(ChatAddress("matrix", room), OutboundText("sending without syncing"))
            receiving = asyncio.create_task(adapter.start_receiving(allowed))
            fake.message(room, FRIEND, text("anyone?"))
            await wait_until(lambda: asked >= 5, what="the adapter asking whether it may sync")
            syncs_while_not_elected = len(fake.calls_to("GET", "/sync")) - syncs_before
            elected = True
            await receiving
            await wait_until(lambda: inbox.texts and not fake.pending(), what="the message once elected")
        finally:
            await adapter.stop()
    assert syncs_while_not_elected == 0
    assert inbox.texts == ["anyone?"]


async def test_a_failing_sync_is_not_connected_until_syncing_recovers_or_stops() -> None:
    """``/readyz`` asks ``status``: a failing sync is reported while the loop runs and clears when it
    syncs again; a process that stops syncing (a cluster leader stepping down to a worker) is not
    judged by a loop it no longer runs."""
    fake, records = world(), MemoryRecordStore(RECORDS)
    room = fake.direct_room(FRIEND)
    async with fake.serve(), adapter_on(fake, Inbox(records)) as adapter:
        fake.fail_next("sync", 1000, status=502, retry_after=None)
        fake.message(room, FRIEND, text("ends the sync under way"))
        await wait_until(lambda: not adapter.status().connected, what="the sync failing")
        assert adapter.status().detail.startswith("Matrix sync failed")
        with fake.lock:
            fake.faults.clear()
        await wait_until(lambda: adapter.status().connected, what="syncing again")
        assert adapter.status().detail == ""
        fake.fail_next("sync", 1000, status=502, retry_after=None)
        fake.message(room, FRIEND, text("ends the sync under way"))
        await wait_until(lambda: not adapter.status().connected, what="the sync failing again")
        await adapter.stop_receiving()
        assert adapter.status().connected and adapter.status().detail == ""
