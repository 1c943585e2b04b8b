"""A reply the platform took, but whose answer the gateway never got, is shown once: the outbox tries
it again with the same delivery key (``adapters.base``), and Matrix (the event's transaction id) and
Discord (the message's enforced nonce) make no second message of it. Through the outbox sender and
the real mautrix / discord.py, against the fake homeserver and the fake Discord, which deduplicate as
the platforms do. Two replies with the same words are still two messages."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from adapters.base import Adapter, ChatAddress, OutboundText
from adapters.discord.adapter import DiscordAdapter
from adapters.matrix.adapter import MatrixAdapter
from adapters.matrix.settings import RECORDS
from adapters.records import MemoryRecordStore
from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from gateway.delivery.pacing import LocalSendPacing
from gateway.delivery.sender import OutboxSender
from gateway.ledger.outbox import Operation, Outbox, OutboxState, Outgoing
from gateway.server.metrics import GatewayMetrics
from tests.fakes.discord import FakeDiscord
from tests.fakes.matrix import FakeMatrix
from tests.platforms.test_discord_adapter import Sink, make_adapter
from tests.platforms.test_matrix_adapter import FRIEND, Inbox, world


@dataclass
class Clock:
    """The sender's clock, turned by the test: a retry is due when the test says, not seconds later."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


class Platform:
    """One platform's fake and a chat on it: adapters for it (one per process start), what the chat
    shows, and how to lose the answer to the next send."""

    name: str
    chat: str

    def adapter(self) -> AbstractAsyncContextManager[Adapter]:
        raise NotImplementedError

    def shown(self) -> list[tuple[str, str]]:
        """The bot's messages in the chat: (message id, text), oldest first."""
        raise NotImplementedError

    def lose_next_answer(self) -> None:
        raise NotImplementedError

    def refuse_next(self) -> None:
        """The next send fails, and nothing is made (an error worth trying again)."""
        raise NotImplementedError


class OnMatrix(Platform):
    name = "matrix"

    def __init__(self, fake: FakeMatrix) -> None:
        self.fake = fake
        self.chat = fake.direct_room(FRIEND)

    @asynccontextmanager
    async def adapter(self) -> AsyncIterator[Adapter]:
        records = MemoryRecordStore(RECORDS)
        adapter = MatrixAdapter(self.fake.url, self.fake.token, records=records, retry_base=0.01)
        await adapter.start(Inbox(records), receive=False)
        try:
            yield adapter
        finally:
            await adapter.stop()

    def shown(self) -> list[tuple[str, str]]:
        events = self.fake.bot_events(self.chat)
        return [(e["event_id"], e["content"]["body"]) for e in events if e["type"] == "m.room.message"]

    def lose_next_answer(self) -> None:
        self.fake.lose_next_answer("send")

    def refuse_next(self) -> None:
        self.fake.fail_next("send", status=500)


class OnDiscord(Platform):
    name = "discord"

    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake
        self.chat = str(fake.channel_id)

    @asynccontextmanager
    async def adapter(self) -> AsyncIterator[Adapter]:
        adapter: DiscordAdapter = make_adapter(self.fake)
        await adapter.start(Sink(), receive=False)
        try:
            yield adapter
        finally:
            await adapter.stop()

    def shown(self) -> list[tuple[str, str]]:
        messages = self.fake.messages(self.fake.channel_id)
        return [(str(message.message_id), message.content) for message in messages]

    def lose_next_answer(self) -> None:
        self.fake.lose_answer_next("POST /channels/*/messages")

    def refuse_next(self) -> None:  # not a 5xx: discord.py tries those again itself, seconds later
        self.fake.fail_network_next("POST /channels/*/messages")


@pytest.fixture(params=["matrix", "discord"])
async def platform(request: pytest.FixtureRequest) -> AsyncIterator[Platform]:
    if request.param == "matrix":
        matrix = world()
        async with matrix.serve():
            yield OnMatrix(matrix)
    else:
        discord = FakeDiscord()
        async with discord.serve():
            yield OnDiscord(discord)


@pytest.fixture
async def outbox(tmp_path: Path, database_url: str | None) -> AsyncIterator[Outbox]:
    """The outbox of a fresh database (on one of the two: these tests are not about storage)."""
    async with open_storage(parse_storage_url(database_url, tmp_path / "state.db")) as storage:
        yield Outbox(storage)


def sender_for(
    outbox: Outbox, platform: Platform, adapter: Adapter, clock: Callable[[], float]
) -> OutboxSender:
    return OutboxSender(outbox, {platform.name: adapter}, LocalSendPacing(), GatewayMetrics(), clock=clock)


def reply(platform: Platform, text: str) -> Outgoing:
    return Outgoing(ChatAddress(platform.name, platform.chat), Operation.SEND, OutboundText(text))


@pytest.mark.parametrize("restart", [False, True], ids=["retried", "after-a-restart"])
async def test_a_reply_taken_whose_answer_was_lost_is_shown_once_and_recorded(
    platform: Platform, outbox: Outbox, restart: bool
) -> None:
    """The platform makes the message, and the connection drops before its answer: the sender cannot
    know, and tries again (in the same process, or in the next one after the first was killed)."""
    [item_id] = await outbox.enqueue([reply(platform, "The answer is 42.")])
    clock = Clock()
    async with platform.adapter() as adapter:
        platform.lose_next_answer()
        await sender_for(outbox, platform, adapter, clock).send_due()
        tried = await outbox.find(item_id)
        assert tried is not None and tried.state is OutboxState.PENDING and tried.attempts == 1
        assert [text for _, text in platform.shown()] == ["The answer is 42."]  # taken, not recorded
        clock.now = tried.next_attempt_at
        if not restart:
            await sender_for(outbox, platform, adapter, clock).send_due()
    if restart:
        async with platform.adapter() as adapter:
            await sender_for(outbox, platform, adapter, clock).send_due()
    sent, shown = await outbox.find(item_id), platform.shown()
    assert [text for _, text in shown] == ["The answer is 42."]
    assert sent is not None and sent.state is OutboxState.SENT and sent.platform_message_id == shown[0][0]


async def test_a_reply_refused_at_first_is_sent_when_tried_again_with_its_key(
    platform: Platform, outbox: Outbox
) -> None:
    """A request the platform refused uses up no key (Synapse forgets a failed transaction, Discord
    keeps the nonces of messages it made): the next attempt, with the same key, makes the message."""
    [item_id] = await outbox.enqueue([reply(platform, "Here it is.")])
    clock = Clock()
    async with platform.adapter() as adapter:
        platform.refuse_next()
        await sender_for(outbox, platform, adapter, clock).send_due()
        tried = await outbox.find(item_id)
        assert tried is not None and tried.state is OutboxState.PENDING and platform.shown() == []
        clock.now = tried.next_attempt_at
        await sender_for(outbox, platform, adapter, clock).send_due()
    sent, shown = await outbox.find(item_id), platform.shown()
    assert [text for _, text in shown] == ["Here it is."]
    assert sent is not None and sent.platform_message_id == shown[0][0]


async def test_two_replies_with_the_same_words_are_two_messages(platform: Platform, outbox: Outbox) -> None:
    first, second = await outbox.enqueue([reply(platform, "Done."), reply(platform, "Done.")])
    async with platform.adapter() as adapter:
        await sender_for(outbox, platform, adapter, Clock()).send_due()
    shown = platform.shown()
    recorded = [await outbox.find(item_id) for item_id in (first, second)]
    assert [text for _, text in shown] == ["Done.", "Done."]
    assert [item.platform_message_id for item in recorded if item] == [message_id for message_id, _ in shown]
