"""The conformance suite's driver for Slack: the fake Slack (Web API, Socket Mode websocket,
``tests/fakes/slack``) driven through the real slack_sdk. The shared chat is a channel; a thread is a
person's message in it and the replies under it; commands are ``/herald <name>``."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from adapters.base import Adapter
from adapters.slack.spec import APP_TOKEN, SPEC
from tests.conformance.driver import Driver, Place, Seen, Sent
from tests.fakes.slack import FakeSlack, SlackMessage
from tests.fakes.slack.server import APP_TOKEN as FAKE_APP_TOKEN
from tests.fakes.slack.server import BOT_TOKEN, BOT_USER

CHANNEL = "CGENERAL"
SLASH = "/herald"
_FENCE = re.compile(r"(?:^_([^_\n]+)_\n)?^```\n(.*?)\n```$", re.S | re.M)
_BOLD = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", re.S)


class SlackDriver(Driver):
    spec = SPEC
    admin, friend, stranger = "UADMIN", "UFRIEND", "USTRANGER"
    rate_limit_burst = 1  # slack_sdk retries no 429: the first one reaches the gateway's budget

    def __init__(self) -> None:
        self.fake = FakeSlack()
        for user in (self.admin, self.friend, self.stranger):
            self.fake.add_user(user, f"user{user}")
        self._threads = 0

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        async with self.fake.serve() as api:
            yield self._section(api)

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        with self.fake.serve_in_thread() as api:
            yield self._section(api)

    def _section(self, api: str) -> dict[str, Any]:
        return {"allowed_users": [self.friend], "api_base": api, "ping_interval": 0.5}

    def environ(self) -> dict[str, str]:
        return {SPEC.token.env: BOT_TOKEN, APP_TOKEN.env: FAKE_APP_TOKEN}

    async def delivered(self, adapter: Adapter) -> None:
        await self.fake.wait_for(lambda: self.fake.unacked() == 0, what="every envelope acknowledged")

    def receiving(self) -> bool:
        return self.fake.live()

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        files = [(document[0], document[1], "text/plain")] if document is not None else []
        if photo is not None:
            files.append(("photo.png", photo, "image/png"))
        place = self.dm_place(user)
        event = self.fake.post(user, place.chat_id, text, files=files or None)
        return Sent(place, event["ts"], event)

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        place = place or self.group_place()
        said = f"<@{BOT_USER}> {text}" if mention else text
        event = self.fake.post(user, place.chat_id, said, thread_ts=place.thread_id)
        return Sent(place, event["ts"], event)

    def thread(self) -> Place:
        self._threads += 1
        parent = self.fake.post(self.admin, CHANNEL, f"thread {self._threads}")
        return Place(CHANNEL, parent["ts"])

    def command(self, user: str, name: str, place: Place) -> Sent:
        self.fake.open_home(user)  # looking for the commands, a person opens the app's Home tab
        payload = self.fake.slash_command(user, place.chat_id, SLASH, name)
        return Sent(place, f"command:{payload['trigger_id']}", payload)

    async def redeliver(self, sent: Sent) -> None:
        self.fake.redeliver(sent.raw)

    def fail_sends(self, count: int, retry_after: float) -> None:
        self.fake.fail_next("chat.postMessage", count, retry_after)

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(self.fake.dm_channel(user))

    def group_place(self) -> Place:
        return Place(CHANNEL)

    def messages(self, place: Place) -> list[Seen]:
        return [seen(m) for m in self.fake.bot_messages(place.chat_id, place.thread_id) if not m.files]

    def send_times(self) -> list[float]:
        return [call.time for call in self.fake.calls_to("chat.postMessage")]

    def published_commands(self) -> set[str]:
        """The commands the App Home tab lists (Slack has no API that publishes slash commands)."""
        names: set[str] = set()
        for view in list(self.fake.views.values()):
            for block in view.get("blocks", ()):
                text = (block.get("text") or {}).get("text", "")
                names.update(re.findall(rf"`{SLASH} ([a-z0-9_]+)`", text))
        return names

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        return [
            (file["name"], file["data"])
            for message in self.fake.bot_messages(place.chat_id, place.thread_id)
            for file in message.files
        ]


def seen(message: SlackMessage) -> Seen:
    """A message as Slack shows its mrkdwn."""
    content = message.text
    code = tuple((m.group(1), html.unescape(m.group(2))) for m in _FENCE.finditer(content))
    prose = _FENCE.sub("", content)
    bold = tuple(html.unescape(m.group(1)) for m in _BOLD.finditer(prose))
    words = _FENCE.sub(lambda m: m.group(2), content)
    words = _BOLD.sub(lambda m: m.group(1), words)
    return Seen(
        message_id=message.ts,
        text=html.unescape(words),
        code=code,
        bold=bold,
        length=len(content),
        versions=len(message.versions),
    )
