"""The conformance suite's driver for Telegram: the fake Bot API (``tests/fakes/telegram``) driven
through the real python-telegram-bot. The shared chat is a forum supergroup: its topics are threads."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from adapters.base import Adapter
from adapters.telegram.spec import SPEC
from adapters.text.units import from_utf16_offset, utf16_len
from tests.conformance.driver import Driver, Place, Seen, Sent
from tests.fakes import FakeTelegram
from tests.fakes.telegram import SentMessage
from tests.fakes.waiting import wait_until

GROUP = -1001234  # the shared chat
FIRST_TOPIC = 11


class TelegramDriver(Driver):
    spec = SPEC
    admin, friend, stranger = "1", "2", "3"
    rate_limit_burst = 3  # the adapter's rate limiter retries a 429 twice, then reports it

    def __init__(self) -> None:
        self.fake = FakeTelegram()
        self._topics = itertools.count(FIRST_TOPIC)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        async with self.fake.serve() as base_url:
            yield self._section(base_url)

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        with self.fake.serve_in_thread() as base_url:
            yield self._section(base_url)

    def _section(self, base_url: str) -> dict[str, Any]:
        return {"base_url": base_url, "allowed_users": [self.friend]}

    def environ(self) -> dict[str, str]:
        return {SPEC.token.env: self.fake.token}

    async def delivered(self, adapter: Adapter) -> None:
        await wait_until(
            lambda: not self.fake.pending_updates(),
            what="every update confirmed",
            describe=self.fake.describe,
        )

    def receiving(self) -> bool:
        return bool(self.fake.calls_to("getUpdates"))  # updates wait for the poller meanwhile

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        name, content = document if document is not None else ("document.txt", None)
        update = self.fake.private_message(
            int(user), text, document=content, file_name=name, mime_type="text/plain", photo=photo,
            first_name=f"user{user}",
        )  # fmt: skip
        return Sent(self.dm_place(user), str(update["message"]["message_id"]), update)

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        topic = int(place.thread_id) if place is not None and place.thread_id else None
        update = self.fake.group_message(
            GROUP, int(user), text, mention_bot=mention, is_forum=True, thread_id=topic, title="Team",
            first_name=f"user{user}",
        )  # fmt: skip
        return Sent(place or self.group_place(), str(update["message"]["message_id"]), update)

    def thread(self) -> Place:
        return Place(str(GROUP), str(next(self._topics)))

    def command(self, user: str, name: str, place: Place) -> Sent:
        if place == self.dm_place(user):
            return self.dm(user, f"/{name}")
        return self.group(user, f"/{name}", place=place)

    async def redeliver(self, sent: Sent) -> None:
        self.fake.redeliver(sent.raw["update_id"])

    def fail_sends(self, count: int, retry_after: float) -> None:
        self.fake.fail_next("sendMessage", 429, retry_after=retry_after, count=count)

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(user)

    def group_place(self) -> Place:
        return Place(str(GROUP))

    def messages(self, place: Place) -> list[Seen]:
        topic = int(place.thread_id) if place.thread_id else None
        return [
            seen(message)
            for message in self.fake.messages(int(place.chat_id), topic)
            if not message.deleted and message.thread_id == topic and message.kind == "text"
        ]

    def send_times(self) -> list[float]:
        return [call.time for call in self.fake.calls_to("sendMessage")]

    def published_commands(self) -> set[str]:
        return {command["command"] for command in self.fake.commands()}

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        topic = int(place.thread_id) if place.thread_id else None
        with self.fake.lock:
            stored = self.fake.chat_messages.get(int(place.chat_id), {})
            return [
                (m.media["document"]["file_name"], self.fake.files[m.media["document"]["file_id"]].content)
                for _, m in sorted(stored.items())
                if m.from_bot and m.kind == "document" and m.thread_id == topic and not m.deleted
            ]


def seen(message: SentMessage) -> Seen:
    """A Telegram message as shown: its text, and what its entities make code and bold."""
    text = message.text

    def span(entity: dict[str, Any]) -> str:
        start = from_utf16_offset(text, entity["offset"])
        return text[start : from_utf16_offset(text, entity["offset"] + entity["length"])]

    return Seen(
        message_id=str(message.message_id),
        text=text,
        code=tuple((e.get("language"), span(e)) for e in message.entities if e["type"] == "pre"),
        bold=tuple(span(e) for e in message.entities if e["type"] == "bold"),
        length=utf16_len(text),
        versions=len(message.versions),
    )
