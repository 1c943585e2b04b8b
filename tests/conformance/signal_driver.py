"""The conformance suite's driver for Signal: the fake signal-cli daemon (``tests/fakes/signal``)
driven by the adapter's own aiohttp client. A direct chat is the person's number; the shared chat is
one group; commands are ``/name`` messages; a mention is U+FFFC with a mention range naming the bot.
Signal has no threads: the thread scenario does not apply. What the bot shows is read from its
messages' text and style ranges, as the apps show them: a monospace block (whole lines) is code, an
italic line just above it its language caption."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from adapters.base import Adapter
from adapters.signal.spec import SPEC
from adapters.text.units import utf16_len
from tests.conformance.driver import Driver, Place, Seen, Sent
from tests.fakes.signal import BOT, GROUP, FakeSignal
from tests.fakes.signal.server import BotMessage


class SignalDriver(Driver):
    spec = SPEC
    admin, friend, stranger = "+15550000002", "+15550000003", "+15550000004"
    rate_limit_burst = 1  # the adapter waits out no rate limit itself: the first goes to the send pacing

    def __init__(self) -> None:
        self.fake = FakeSignal()
        for number in (self.admin, self.friend, self.stranger):
            self.fake.add_person(number, f"user{number}")

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        async with self.fake.serve() as url:
            yield self._section(url)

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        with self.fake.serve_in_thread() as url:
            yield self._section(url)

    def _section(self, url: str) -> dict[str, Any]:
        return {"daemon_url": url, "allowed_users": [self.friend]}

    def environ(self) -> dict[str, str]:
        return {SPEC.token.env: BOT}

    async def delivered(self, adapter: Adapter) -> None:
        """Every envelope was written into the stream and the adapter dealt with as many (it reads the
        next only once the sink stored the one before)."""
        await self.fake.wait_for(
            lambda: self.fake.settled() and getattr(adapter, "handled", -1) >= self.fake.pushed,
            what="every envelope handed over",
        )

    def receiving(self) -> bool:
        return self.fake.receiving()

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        files: tuple[tuple[str | None, str, bytes], ...] = ()
        if document is not None:
            files = ((document[0], "text/plain", document[1]),)
        elif photo is not None:
            files = ((None, "image/png", photo),)
        return self._sent(Place(user), self.fake.message(user, text, files=files))

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        if mention:
            return self._sent(self.group_place(), self.fake.message(user, f"\ufffc {text}", group=True,
                                                                    mention_at=(0,)))  # fmt: skip
        return self._sent(self.group_place(), self.fake.message(user, text, group=True))

    def thread(self) -> Place:
        raise NotImplementedError("Signal has no threads")

    def command(self, user: str, name: str, place: Place) -> Sent:
        group = place.chat_id.startswith("group:")
        return self._sent(place, self.fake.message(user, f"/{name}", group=group))

    def _sent(self, place: Place, payload: dict[str, Any]) -> Sent:
        envelope = payload["envelope"]
        return Sent(place, f"{envelope['timestamp']}:{envelope['sourceNumber']}", payload)

    async def redeliver(self, sent: Sent) -> None:
        self.fake.redeliver(sent.raw)

    def fail_sends(self, count: int, retry_after: float) -> None:
        self.fake.fail_sends(count, retry_after)

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(user)

    def group_place(self) -> Place:
        return Place(f"group:{GROUP}")

    def messages(self, place: Place) -> list[Seen]:
        return [seen(message) for message in self.fake.bot_messages(place.chat_id) if message.versions[0][0]]

    def send_times(self) -> list[float]:
        with self.fake.lock:
            return list(self.fake.send_times)

    def published_commands(self) -> set[str]:
        with self.fake.lock:
            return {word[1:] for word in self.fake.about.split() if word.startswith("/")}

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        return [(name, data) for message in self.fake.bot_messages(place.chat_id)
                for name, _, data in message.attachments]  # fmt: skip


def seen(message: BotMessage) -> Seen:
    """A message as the apps show it: its latest text with its style ranges."""
    text, styles = message.versions[-1]
    ranges = [(int(start), int(length), style) for start, length, style in (s.split(":") for s in styles)]

    def part(start: int, length: int) -> str:
        units = text.encode("utf-16-le")
        return units[start * 2 : (start + length) * 2].decode("utf-16-le")

    code = []
    for start, length, style in ranges:
        if style != "MONOSPACE" or not _whole_lines(text, part, start, length):
            continue
        caption = [
            part(s, n)
            for s, n, st in ranges
            if st == "ITALIC" and s + n + 1 == start and _whole_lines(text, part, s, n)
        ]
        code.append((caption[0] if caption else None, part(start, length)))
    return Seen(
        message_id=f"{message.timestamp}:{BOT}",
        text=text,
        code=tuple(code),
        bold=tuple(part(start, length) for start, length, style in ranges if style == "BOLD"),
        length=utf16_len(text),
        versions=len(message.versions),
    )


def _whole_lines(text: str, part: Any, start: int, length: int) -> bool:
    before = part(start - 1, 1) if start > 0 else "\n"
    after = part(start + length, 1) if start + length < utf16_len(text) else "\n"
    return before == "\n" and after == "\n"
