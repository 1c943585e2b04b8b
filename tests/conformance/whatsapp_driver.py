"""The conformance suite's driver for WhatsApp: the fake Cloud API (``tests/fakes/whatsapp``) posting
signed webhooks to the gateway's HTTP server, which listens on a port the driver chose (Meta's
callback URL). WhatsApp has direct chats only (the Cloud API has no groups) and cannot edit a sent
message; commands are ``/name`` messages, the menu is the number's conversational commands."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from adapters.base import Adapter
from adapters.whatsapp.settings import WEBHOOK_PATH
from adapters.whatsapp.spec import APP_SECRET, SPEC, VERIFY_TOKEN
from tests.conformance.driver import Driver, Place, Seen, Sent
from tests.fakes.whatsapp import APP_SECRET as FAKE_APP_SECRET
from tests.fakes.whatsapp import NUMBER_ID, BotMessage, FakeWhatsApp
from tests.fakes.whatsapp import TOKEN as FAKE_TOKEN
from tests.fakes.whatsapp import VERIFY_TOKEN as FAKE_VERIFY_TOKEN

THROUGHPUT = 130429  # the number's throughput limit: Meta's "wait a second"
_FENCE = re.compile(r"(?:^_([^_\n]+)_\n)?^```\n(.*?)\n```$", re.S | re.M)
_BOLD = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", re.S)


class WhatsAppDriver(Driver):
    spec = SPEC
    admin, friend, stranger = "4915100000001", "4915100000002", "4915100000003"
    rate_limit_burst = 1  # the adapter waits out no limit itself: the first goes to the send pacing
    shared_chats = False
    edits = False

    def __init__(self) -> None:
        self.fake = FakeWhatsApp()
        for user in (self.admin, self.friend, self.stranger):
            self.fake.add_person(user, f"user{user}")
        self.port = _free_port()
        self.fake.webhooks_to(f"http://127.0.0.1:{self.port}{WEBHOOK_PATH}")

    def gateway_section(self) -> dict[str, Any]:
        return {"http_host": "127.0.0.1", "http_port": self.port}

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        async with self.fake.serve() as url:
            yield self._section(url)

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        with self.fake.serve_in_thread() as url:
            yield self._section(url)

    def _section(self, url: str) -> dict[str, Any]:
        return {"phone_number_id": NUMBER_ID, "allowed_numbers": [self.friend], "api_base": url}

    def environ(self) -> dict[str, str]:
        return {
            SPEC.token.env: FAKE_TOKEN,
            APP_SECRET.env: FAKE_APP_SECRET,
            VERIFY_TOKEN.env: FAKE_VERIFY_TOKEN,
        }

    async def delivered(self, adapter: Adapter) -> None:
        """Every webhook was answered 200, which the adapter does only once the sink stored it."""
        await self.fake.wait_for(lambda: self.fake.pending_webhooks() == 0, what="every webhook answered 200")

    def receiving(self) -> bool:
        return self.fake.verify()  # Meta's verification GET is answered: the gateway's webhook is up

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        if document is not None:
            message_id = self.fake.document(user, document[0], document[1], "text/plain", caption=text)
        elif photo is not None:
            message_id = self.fake.image(user, photo, "image/png", caption=text)
        else:
            message_id = self.fake.text(user, text)
        return Sent(self.dm_place(user), message_id)

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        raise NotImplementedError("the WhatsApp Cloud API has no shared chats")

    def thread(self) -> Place:
        raise NotImplementedError("the WhatsApp Cloud API has no threads")

    def command(self, user: str, name: str, place: Place) -> Sent:
        return Sent(place, self.fake.text(user, f"/{name}"))

    async def redeliver(self, sent: Sent) -> None:
        self.fake.redeliver(sent.message_id)

    def fail_sends(self, count: int, retry_after: float) -> None:
        """Meta names no wait: its throughput error means a second, which is what the suite asks."""
        assert retry_after == 1.0, "WhatsApp's throughput limit asks for a one-second wait"
        self.fake.fail_next(count, THROUGHPUT)

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(user)

    def group_place(self) -> Place:
        raise NotImplementedError("the WhatsApp Cloud API has no shared chats")

    def messages(self, place: Place) -> list[Seen]:
        return [seen(m) for m in self.fake.bot_messages(place.chat_id) if m.kind in ("text", "template")]

    def send_times(self) -> list[float]:
        with self.fake.lock:
            return list(self.fake.send_times)

    def published_commands(self) -> set[str]:
        with self.fake.lock:
            return {command["command_name"] for command in self.fake.commands}

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        return [
            (m.body.get("filename", ""), m.media[2])
            for m in self.fake.bot_messages(place.chat_id)
            if m.kind == "document" and m.media is not None
        ]


def seen(message: BotMessage) -> Seen:
    """A message as WhatsApp shows its markup: style marks hidden, code blocks in monospace."""
    content = message.text if message.kind == "text" else f"[template {message.body.get('name')}]"
    code = tuple((m.group(1), m.group(2)) for m in _FENCE.finditer(content))
    bold = tuple(m.group(1) for m in _BOLD.finditer(_FENCE.sub("", content)))
    words = _BOLD.sub(lambda m: m.group(1), _FENCE.sub(lambda m: m.group(2), content))
    return Seen(message_id=message.id, text=words, code=code, bold=bold, length=len(content), versions=1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
