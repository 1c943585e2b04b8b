"""The gateway's Matrix adapter against a real homeserver: Synapse on SQLite (``tests/synapse_server.py``),
one per test session, with a real person on it writing through the client-server API as Element does.

What the fake homeserver (``tests/fakes/matrix``) cannot prove: that Synapse's own answers (its sync,
invites, relations, edits, cut timelines) are read and written the way the adapter expects. Through
the whole gateway: a DM invite from an allowed person accepted and answered; a thread answered in
its thread; a gateway stopped while someone writes answers that message once after its restart and
replays nothing; an invite from anyone else declined. Through the adapter alone: a long absence
paged in whole; a room's history from before the invite not handed over; an encrypted room refused
out loud; a send repeated with its delivery key one event, and a refused one using up no key."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from adapters.base import ChatAddress, DeliveryError, OutboundText
from adapters.matrix.adapter import DECLINED, ENCRYPTED_NOTICE, MatrixAdapter
from adapters.matrix.settings import RECORDS
from adapters.matrix.spec import TOKEN
from adapters.records import MemoryRecordStore
from gateway.app import Gateway, open_gateway
from gateway.home import HeraldHome
from tests.conformance.harness import STREAM_INTERVAL, idle, user_texts
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.platforms.test_matrix_adapter import Inbox
from tests.synapse_server import REQUEST_TIMEOUT, SERVER_NAME, Account, SynapseMissing, SynapseServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def synapse() -> Iterator[SynapseServer]:
    """The session's Synapse; skipped only when Synapse is not installed (``pip install -e '.[test]'``)."""
    try:
        server = SynapseServer()
    except SynapseMissing as missing:
        pytest.skip(str(missing))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Answer:
    """A message of the bot as the person's client shows it: its latest text, and its thread."""

    event_id: str
    text: str
    thread: str | None


class Person:
    """A person on the homeserver, calling its client-server API as a client does."""

    def __init__(self, homeserver: str, account: Account) -> None:
        self.user_id = account.user_id
        self._base = f"{homeserver}/_matrix/client/v3"
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {account.token}"},
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
        )
        self._transactions = itertools.count()

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        async with self._session.request(method, self._base + path, json=body, params=query) as answer:
            found = await answer.json()
            if answer.status >= 300:
                raise LookupError(f"{method} {path}: HTTP {answer.status} {found}")
            return found

    async def direct_chat(self, bot: str) -> str:
        """A new direct chat with ``bot`` invited, as Element starts one; its room id."""
        body = {"invite": [bot], "is_direct": True, "preset": "trusted_private_chat"}
        return str((await self._call("POST", "/createRoom", body))["room_id"])

    async def room(self, invite: list[str], *, encrypted: bool = False) -> str:
        """A new private room with ``invite`` invited (``encrypted``: end-to-end); its room id."""
        body: dict[str, Any] = {"invite": invite, "preset": "private_chat", "name": "a shared room"}
        if encrypted:
            encryption = {"algorithm": "m.megolm.v1.aes-sha2"}
            body["initial_state"] = [{"type": "m.room.encryption", "state_key": "", "content": encryption}]
        return str((await self._call("POST", "/createRoom", body))["room_id"])

    async def invite(self, room: str, user: str) -> None:
        await self._call("POST", f"/rooms/{quote(room, safe='')}/invite", {"user_id": user})

    async def join(self, room: str) -> None:
        await self._call("POST", f"/rooms/{quote(room, safe='')}/join", {})

    async def say(
        self, room: str, text: str, *, thread: str | None = None, mention: str | None = None
    ) -> str:
        """A text message (in ``thread``, an ``m.thread`` under that root; ``mention``: of that user, as
        Element's pill does); its event id."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": f"{mention}: {text}" if mention else text}
        content["m.mentions"] = {"user_ids": [mention]} if mention else {}
        if thread is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }  # fmt: skip
        path = f"/rooms/{quote(room, safe='')}/send/m.room.message/person-{next(self._transactions)}"
        return str((await self._call("PUT", path, content))["event_id"])

    async def timeline(self, room: str) -> list[dict[str, Any]]:
        """The room's events the person can see, oldest first."""
        page = await self._call("GET", f"/rooms/{quote(room, safe='')}/messages", dir="b", limit="1000")
        return list(reversed(page["chunk"]))

    async def membership(self, room: str, user: str) -> str | None:
        """``join``, ``invite``, ``leave``... of ``user`` in ``room`` now."""
        path = f"/rooms/{quote(room, safe='')}/state/m.room.member/{quote(user, safe='')}"
        return str((await self._call("GET", path)).get("membership"))

    async def answers(self, room: str, bot: str) -> list[Answer]:
        """The bot's messages in ``room``, each with its latest edit applied."""
        events = [
            e for e in await self.timeline(room) if e["sender"] == bot and e["type"] == "m.room.message"
        ]
        latest: dict[str, str] = {}
        for event in events:
            relates = event["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace":
                latest[relates["event_id"]] = event["content"]["m.new_content"]["body"]
        found = []
        for event in events:
            relates = event["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace":
                continue
            thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
            text = latest.get(event["event_id"], event["content"]["body"])
            found.append(Answer(event["event_id"], text, thread))
        return found

    async def wait_answers(self, room: str, bot: str, count: int) -> None:
        """Until the bot's ``count`` messages are there (their last edits may still come)."""

        async def there() -> bool:
            return len(await self.answers(room, bot)) >= count

        await wait_until_awaited(there, what=f"{count} answer(s) of the bot in {room}")


@asynccontextmanager
async def person(synapse: SynapseServer, name: str) -> AsyncIterator[Person]:
    someone = Person(synapse.url, await synapse.register(name))
    try:
        yield someone
    finally:
        await someone.close()


@asynccontextmanager
async def gateway_on(
    synapse: SynapseServer, bot: Account, home: HeraldHome, emulator_url: str, allowed: list[str]
) -> AsyncIterator[Gateway]:
    """``herald gateway run`` as the bot, its matrix section pointing at Synapse, ``allowed`` allowed."""
    section = {"homeserver": synapse.url, "allowed_users": allowed}
    gateway = {"http_port": 0, "stream_edit_interval": STREAM_INTERVAL}
    config = make_config(emulator_url, "anthropic", gateway=gateway, matrix=section)
    async with open_gateway(config, home, environ={TOKEN.env: bot.token}) as opened:
        yield opened


async def settled(gateway: Gateway) -> None:
    await wait_until_awaited(lambda: idle(gateway), what="the gateway idle")


async def joined(someone: Person, room: str, bot: str) -> None:
    async def bot_in() -> bool:
        return await someone.membership(room, bot) == "join"

    await wait_until_awaited(bot_in, what=f"{bot} joined {room}")


async def test_a_direct_chat_invite_from_an_allowed_person_is_accepted_and_answered_in_it(
    synapse: SynapseServer, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    bot = await synapse.register("bot")
    emulator.script(Reply(text="Hello, **friend**."))
    async with (
        person(synapse, "friend") as friend,
        gateway_on(synapse, bot, home, emulator_url, [friend.user_id]) as gateway,
    ):
        room = await friend.direct_chat(bot.user_id)
        await joined(friend, room, bot.user_id)
        await friend.say(room, "hello there")
        await friend.wait_answers(room, bot.user_id, 1)
        await settled(gateway)
        answers = await friend.answers(room, bot.user_id)
    assert [(answer.text, answer.thread) for answer in answers] == [("Hello, **friend**.", None)]
    [request] = emulator.requests
    assert user_texts(request)[-1].endswith("hello there")


async def test_in_a_room_a_thread_is_a_session_of_its_own_and_its_answer_stays_in_it(
    synapse: SynapseServer, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    bot = await synapse.register("bot")
    emulator.script(Reply(text="About the detail."), Reply(text="About the room."))
    async with (
        person(synapse, "friend") as friend,
        person(synapse, "other") as other,
        gateway_on(synapse, bot, home, emulator_url, [friend.user_id]) as gateway,
    ):
        room = await friend.room([bot.user_id, other.user_id])
        await other.join(room)
        await joined(friend, room, bot.user_id)
        root = await friend.say(room, "a new topic")  # in a room: not addressed to the bot
        await friend.say(room, "a detail of it", thread=root, mention=bot.user_id)
        await friend.wait_answers(room, bot.user_id, 1)
        await friend.say(room, "and the room?", mention=bot.user_id)
        await friend.wait_answers(room, bot.user_id, 2)
        await settled(gateway)
        answers = await friend.answers(room, bot.user_id)
        sessions = await gateway.services.runtime.store.sessions.recent()
    assert [(answer.text, answer.thread) for answer in answers] == [
        ("About the detail.", root),
        ("About the room.", None),
    ]
    assert len(sessions) == 2 and len(emulator.requests) == 2
    assert user_texts(emulator.requests[0])[-1].endswith("a detail of it")
    assert len(user_texts(emulator.requests[1])) == 1  # the room's session knows nothing of the thread


async def test_what_was_written_while_the_gateway_was_stopped_is_answered_once_and_nothing_replayed(
    synapse: SynapseServer, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    bot = await synapse.register("bot")
    emulator.script(Reply(text="First answer."), Reply(text="Second answer."))
    async with person(synapse, "friend") as friend:
        async with gateway_on(synapse, bot, home, emulator_url, [friend.user_id]) as gateway:
            room = await friend.direct_chat(bot.user_id)
            await joined(friend, room, bot.user_id)
            await friend.say(room, "one")
            await friend.wait_answers(room, bot.user_id, 1)
            await settled(gateway)
        # stopped with its sync held open by Synapse; the person writes on meanwhile
        await friend.say(room, "two, while the bot was away")
        async with gateway_on(synapse, bot, home, emulator_url, [friend.user_id]) as gateway:
            await friend.wait_answers(room, bot.user_id, 2)
            await settled(gateway)
            answers = await friend.answers(room, bot.user_id)
    assert [answer.text for answer in answers] == ["First answer.", "Second answer."]
    assert len(emulator.requests) == 2  # "one" was not asked again
    asked = user_texts(emulator.requests[1])
    assert len(asked) == 2 and asked[0].endswith("one") and asked[1].endswith("two, while the bot was away")


async def test_an_invite_from_someone_not_allowed_is_declined(
    synapse: SynapseServer, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    bot = await synapse.register("bot")
    async with (
        person(synapse, "stranger") as stranger,
        gateway_on(synapse, bot, home, emulator_url, [f"@friend:{SERVER_NAME}"]),
    ):
        room = await stranger.direct_chat(bot.user_id)

        async def left() -> bool:
            return await stranger.membership(room, bot.user_id) == "leave"

        await wait_until_awaited(left, what="the bot declined the invite")
        events = await stranger.timeline(room)
    memberships = [
        (event["content"]["membership"], event["content"].get("reason"))
        for event in events
        if event["type"] == "m.room.member" and event["state_key"] == bot.user_id
    ]
    assert memberships == [("invite", None), ("leave", DECLINED)]  # never joined
    assert emulator.requests == []


async def test_a_long_absence_is_paged_in_whole_in_order(synapse: SynapseServer) -> None:
    """More was written while the bot was away than one sync's timeline holds: Synapse cuts it
    (``limited``) and the adapter pages the rest in from the room's history, up to its stored token."""
    bot, records = await synapse.register("bot"), MemoryRecordStore(RECORDS)
    async with person(synapse, "friend") as friend:
        away = MatrixAdapter(synapse.url, bot.token, records=records, invite_from={friend.user_id})
        await away.start(Inbox(records))
        try:
            room = await friend.direct_chat(bot.user_id)
            await joined(friend, room, bot.user_id)
        finally:
            await away.stop()
        for n in range(70):
            await friend.say(room, f"message {n}")
        inbox = Inbox(records)
        back = MatrixAdapter(synapse.url, bot.token, records=records, invite_from={friend.user_id})
        await back.start(inbox)
        try:
            await wait_until(lambda: len(inbox.texts) >= 70, what="the 70 messages handed over")
        finally:
            await back.stop()
    assert inbox.texts == [f"message {n}" for n in range(70)]


async def test_a_room_s_history_from_before_the_invite_is_not_handed_over_what_came_after_it_is(
    synapse: SynapseServer,
) -> None:
    """Synapse shows a room the bot has just joined with its recent history: what was written before
    the invite is not for the bot (not even a mention of it); what came after it, before the bot
    joined, is."""
    bot, records = await synapse.register("bot"), MemoryRecordStore(RECORDS)
    async with person(synapse, "friend") as friend, person(synapse, "other") as other:
        away = MatrixAdapter(synapse.url, bot.token, records=records, invite_from={friend.user_id})
        await away.start(Inbox(records))  # the bot has run: it has a sync token
        await away.stop()
        room = await friend.room([other.user_id])
        await other.join(room)
        await friend.say(room, "an old question", mention=bot.user_id)
        await other.say(room, "old chatter")
        await friend.invite(room, bot.user_id)
        await friend.say(room, "welcome", mention=bot.user_id)
        inbox = Inbox(records)
        back = MatrixAdapter(synapse.url, bot.token, records=records, invite_from={friend.user_id})
        await back.start(inbox)
        try:
            await wait_until(lambda: inbox.texts, what="the room's news handed over")
        finally:
            await back.stop()
    assert inbox.texts == [f"{bot.user_id}: welcome"]


async def test_invited_to_an_encrypted_room_the_bot_says_it_cannot_read_it_and_leaves(
    synapse: SynapseServer,
) -> None:
    bot, records = await synapse.register("bot"), MemoryRecordStore(RECORDS)
    async with person(synapse, "friend") as friend:
        adapter = MatrixAdapter(synapse.url, bot.token, records=records, invite_from={friend.user_id})
        await adapter.start(Inbox(records))
        try:
            room = await friend.room([bot.user_id], encrypted=True)

            async def left() -> bool:
                return await friend.membership(room, bot.user_id) == "leave"

            await wait_until_awaited(left, what="the bot left the encrypted room")
            said = await friend.answers(room, bot.user_id)
        finally:
            await adapter.stop()
    assert [answer.text for answer in said] == [ENCRYPTED_NOTICE]


async def test_a_send_repeated_with_its_key_is_one_event_and_a_refused_one_uses_up_no_key(
    synapse: SynapseServer,
) -> None:
    """What the outbox's delivery keys and the fake homeserver assume of Synapse: a transaction id the
    bot's access token used before in a room answers that event again and adds none, also from another
    process (a restart); one whose send was refused (the bot not yet in the room) makes its event later."""
    bot, records = await synapse.register("bot"), MemoryRecordStore(RECORDS)
    async with person(synapse, "friend") as friend:
        room = await friend.room([bot.user_id])
        address = ChatAddress("matrix", room)
        first = MatrixAdapter(synapse.url, bot.token, records=records, invite_from={friend.user_id})
        await first.start(Inbox(records), receive=False)  # not syncing: the invite waits
        try:
            with pytest.raises(DeliveryError):
                await first.send(address, OutboundText("Hello."), key="1-refused")
            await first.start_receiving()  # takes the invite
            await joined(friend, room, bot.user_id)
            hello = await first.send(address, OutboundText("Hello."), key="1-refused")
            once = await first.send(address, OutboundText("Once."), key="2-once")
        finally:
            await first.stop()
        second = MatrixAdapter(synapse.url, bot.token, records=records)
        await second.start(Inbox(records), receive=False)
        try:
            again = await second.send(address, OutboundText("Once."), key="2-once")
            other = await second.send(address, OutboundText("Once."), key="3-other")
        finally:
            await second.stop()
        answers = await friend.answers(room, bot.user_id)
    assert again == once and len({hello, once, other}) == 3
    assert [(answer.event_id, answer.text) for answer in answers] == [
        (hello, "Hello."), (once, "Once."), (other, "Once."),
    ]  # fmt: skip
