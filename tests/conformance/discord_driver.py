"""The conformance suite's driver for Discord: the fake Discord (REST and gateway websocket,
``tests/fakes/discord``) driven through the real discord.py. The shared chat is a text channel of the
fake's guild; a thread is a channel of its own under it; commands are slash commands."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from adapters.base import Adapter
from adapters.discord.adapter import DiscordAdapter
from adapters.discord.spec import SPEC
from tests.conformance.driver import Driver, Place, Seen, Sent, markdown_bold, markdown_code, markdown_words
from tests.fakes import FakeDiscord
from tests.fakes.discord.records import SentMessage
from tests.fakes.waiting import wait_until

SEND_ROUTE = "POST /channels/{channel_id}/messages"


class DiscordDriver(Driver):
    spec = SPEC
    admin, friend, stranger = "1001", "1002", "1003"
    rate_limit_burst = 5  # discord.py tries a request five times, waiting out each 429, then gives up

    def __init__(self) -> None:
        self.fake = FakeDiscord()
        for user in (self.admin, self.friend, self.stranger):
            self.fake.add_user(int(user), f"user{user}")
            self.fake.add_member(self.fake.guild_id, int(user), f"user{user}")
        self._threads: set[str] = set()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        async with self.fake.serve() as urls:
            yield self._section(urls.rest, urls.gateway)

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        with self.fake.serve_in_thread() as urls:
            yield self._section(urls.rest, urls.gateway)

    def _section(self, rest: str, gateway: str) -> dict[str, Any]:
        return {"allowed_users": [self.friend], "api_base": rest, "gateway_url": gateway}

    def environ(self) -> dict[str, str]:
        return {SPEC.token.env: self.fake.token}

    async def delivered(self, adapter: Adapter) -> None:
        await self.fake.wait_received()
        assert isinstance(adapter, DiscordAdapter)
        await wait_until(
            lambda: adapter.inbound_backlog == 0, what="the adapter's inbound queue empty",
            describe=self.fake.describe,
        )  # fmt: skip

    def receiving(self) -> bool:
        return bool(self.fake.live_sessions())  # a connected gateway session: events reach it

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        files = dict([document]) if document is not None else {}
        if photo is not None:
            files["photo.png"] = photo
        payload = self.fake.dm_message(int(user), text, files=files or None)
        return Sent(self.dm_place(user), str(payload["id"]), payload)

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        place = place or self.group_place()
        thread = int(place.chat_id) if place.chat_id in self._threads else None
        payload = self.fake.guild_message(
            self.fake.channel_id, int(user), text, mention_bot=mention, thread_id=thread,
            username=f"user{user}",
        )  # fmt: skip
        return Sent(place, str(payload["id"]), payload)

    def thread(self) -> Place:
        thread = str(self.fake.add_thread(self.fake.channel_id, f"thread {len(self._threads) + 1}"))
        self._threads.add(thread)
        return Place(thread)

    def command(self, user: str, name: str, place: Place) -> Sent:
        guild = None if place == self.dm_place(user) else self.fake.guild_id
        channel = int(place.chat_id)
        payload = self.fake.interaction(name, user_id=int(user), channel_id=channel, guild_id=guild)
        return Sent(place, str(payload["id"]), payload)

    async def redeliver(self, sent: Sent) -> None:
        """After a resumed session Discord replays what it dispatched: the same message again."""
        self.fake.force_reconnect(resume=True)
        await self.fake.wait_for_session()
        self.fake.replay(int(sent.message_id))

    def fail_sends(self, count: int, retry_after: float) -> None:
        self.fake.fail_next("POST /channels/*/messages", 429, retry_after=retry_after, count=count)

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(str(self.fake.dm_channel(int(user))))

    def group_place(self) -> Place:
        return Place(str(self.fake.channel_id))

    def messages(self, place: Place) -> list[Seen]:
        return [
            seen(message)
            for message in self.fake.messages(int(place.chat_id))
            if message.author_id == self.fake.bot_id and not message.deleted and not message.attachments
        ]

    def send_times(self) -> list[float]:
        return [call.time for call in self.fake.calls_to(SEND_ROUTE)]

    def published_commands(self) -> set[str]:
        return {command["name"] for command in self.fake.commands()}

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        return [
            (attachment.filename, attachment.data)
            for message in self.fake.messages(int(place.chat_id))
            if message.author_id == self.fake.bot_id and not message.deleted
            for attachment in message.attachments
        ]


def seen(message: SentMessage) -> Seen:
    """A Discord message as shown: Discord renders its Markdown."""
    content = message.content
    return Seen(
        message_id=str(message.message_id),
        text=markdown_words(content),
        code=markdown_code(content),
        bold=markdown_bold(content),
        length=len(content),
        versions=len(message.versions),
    )
