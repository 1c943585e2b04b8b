"""The conformance suite's driver for Matrix: the fake homeserver (``tests/fakes/matrix``) driven
through the real mautrix. A direct chat is a room of the person and the bot; the shared chat is a room
of everyone; a thread is an ``m.thread`` under a root message of that room; commands are ``/name``
messages. What the bot shows is read from its messages' HTML (``formatted_body``), as a client would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from html.parser import HTMLParser
from typing import Any

from adapters.base import Adapter
from adapters.matrix.spec import SPEC
from tests.conformance.driver import Driver, Place, Seen, Sent
from tests.fakes.matrix import BOT, BOT_NAME, SERVER, FakeMatrix


class MatrixDriver(Driver):
    spec = SPEC
    admin, friend, stranger = f"@admin:{SERVER}", f"@friend:{SERVER}", f"@stranger:{SERVER}"
    rate_limit_burst = 1  # the adapter waits out no 429 itself: the first goes to the send pacing

    def __init__(self) -> None:
        self.fake = FakeMatrix()
        for user in (self.admin, self.friend, self.stranger):
            self.fake.add_user(user, f"user{user}")
        self.room = self.fake.create_room([self.admin, self.friend, self.stranger])

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[dict[str, Any]]:
        async with self.fake.serve() as url:
            yield self._section(url)

    @contextmanager
    def serving_in_thread(self) -> Iterator[dict[str, Any]]:
        with self.fake.serve_in_thread() as url:
            yield self._section(url)

    def _section(self, url: str) -> dict[str, Any]:
        return {"homeserver": url, "allowed_users": [self.friend]}

    def environ(self) -> dict[str, str]:
        return {SPEC.token.env: self.fake.token}

    async def delivered(self, adapter: Adapter) -> None:
        """Every event the bot can see was confirmed: a later sync came with a token past it, which
        the adapter sends only once the sink stored the batch."""
        await self.fake.wait_for(lambda: not self.fake.pending(), what="every event confirmed by a sync")

    def receiving(self) -> bool:
        with self.fake.lock:
            return self.fake.open_syncs > 0  # an incremental sync waits: new events reach it

    # --- what people do -------------------------------------------------------------------------

    def dm(self, user: str, text: str, *, document: tuple[str, bytes] | None = None,
           photo: bytes | None = None) -> Sent:  # fmt: skip
        room = self.fake.direct_room(user)
        if document is not None:
            name, data = document
            content = media_content(
                "m.file", self.fake.upload(data, "text/plain", name), name, "text/plain", data, text
            )
        elif photo is not None:
            content = media_content("m.image", self.fake.upload(photo, "image/png", "photo.png"), "photo.png",
                                    "image/png", photo, text)  # fmt: skip
        else:
            content = {"msgtype": "m.text", "body": text}
        event = self.fake.message(room, user, content)
        return Sent(Place(room), event["event_id"], event)

    def group(self, user: str, text: str, *, mention: bool = False, place: Place | None = None) -> Sent:
        place = place or self.group_place()
        content: dict[str, Any] = {"msgtype": "m.text", "body": f"{BOT_NAME}: {text}" if mention else text}
        content["m.mentions"] = {"user_ids": [BOT]} if mention else {}
        if place.thread_id is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread", "event_id": place.thread_id, "is_falling_back": True,
                "m.in_reply_to": {"event_id": place.thread_id},
            }  # fmt: skip
        event = self.fake.message(place.chat_id, user, content)
        return Sent(place, event["event_id"], event)

    def thread(self) -> Place:
        root = self.fake.message(
            self.room, self.admin, {"msgtype": "m.text", "body": "a new topic", "m.mentions": {}}
        )
        return Place(self.room, root["event_id"])

    def command(self, user: str, name: str, place: Place) -> Sent:
        event = self.fake.message(place.chat_id, user, {"msgtype": "m.text", "body": f"/{name}"})
        return Sent(place, event["event_id"], event)

    async def redeliver(self, sent: Sent) -> None:
        self.fake.redeliver(sent.message_id)

    def fail_sends(self, count: int, retry_after: float) -> None:
        self.fake.fail_next("send", count, retry_after=retry_after)

    # --- what the bot did -----------------------------------------------------------------------

    def dm_place(self, user: str) -> Place:
        return Place(self.fake.direct_room(user))

    def group_place(self) -> Place:
        return Place(self.room)

    def messages(self, place: Place) -> list[Seen]:
        events = self.fake.bot_events(place.chat_id)
        edits: dict[str, list[dict[str, Any]]] = {}
        for event in events:
            relates = event["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace":
                edits.setdefault(relates["event_id"], []).append(event)
        return [
            seen(event, edits.get(event["event_id"], []))
            for event in events
            if event["type"] == "m.room.message"
            and event["content"].get("msgtype") == "m.text"
            and not event.get("redacted")
            and (event["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
            and thread_of(event) == place.thread_id
        ]

    def send_times(self) -> list[float]:
        with self.fake.lock:
            return list(self.fake.send_times)

    def published_commands(self) -> set[str]:
        with self.fake.lock:
            listing = self.fake.account_data.get("io.herald.commands", {})
        return {command["name"] for command in listing.get("commands", [])}

    def files(self, place: Place) -> list[tuple[str, bytes]]:
        found = []
        for event in self.fake.bot_events(place.chat_id):
            content = event["content"]
            if content.get("msgtype") in ("m.file", "m.image", "m.audio", "m.video"):
                upload = self.fake.uploaded(content["url"])
                assert upload is not None, f"the bot sent {content['url']}, which was never uploaded"
                found.append((content.get("filename", content["body"]), upload[2]))
        return found


def media_content(msgtype: str, url: str, name: str, mime: str, data: bytes, caption: str) -> dict[str, Any]:
    """A file message; ``caption`` is its body when it has one (the file's name is then ``filename``)."""
    return {
        "msgtype": msgtype, "body": caption or name, "filename": name, "url": url,
        "info": {"mimetype": mime, "size": len(data)},
    }  # fmt: skip


def thread_of(event: dict[str, Any]) -> str | None:
    relates = event["content"].get("m.relates_to") or {}
    return relates.get("event_id") if relates.get("rel_type") == "m.thread" else None


def seen(event: dict[str, Any], edits: list[dict[str, Any]]) -> Seen:
    """A message as a client shows it: its latest text (an edit's ``m.new_content``), from the HTML."""
    content = edits[-1]["content"]["m.new_content"] if edits else event["content"]
    shown = Shown()
    shown.feed(content.get("formatted_body", "") if content.get("format") == "org.matrix.custom.html" else "")
    shown.close()
    text = "".join(shown.text).strip() if content.get("formatted_body") else content["body"]
    return Seen(
        message_id=event["event_id"],
        text=text,
        code=tuple(shown.code),
        bold=tuple(shown.bold),
        length=len(content["body"]),
        versions=1 + len(edits),
    )


class Shown(HTMLParser):
    """The words, code blocks and bold spans of Matrix HTML as a client renders them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.code: list[tuple[str | None, str]] = []
        self.bold: list[str] = []
        self._pre: list[str] | None = None
        self._language: str | None = None
        self._strong: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "pre":
            self._pre, self._language = [], None
        elif tag == "code" and self._pre is not None:
            classes = dict(attrs).get("class") or ""
            self._language = classes.removeprefix("language-") if classes.startswith("language-") else None
        elif tag == "strong" and self._pre is None:
            self._strong = []
        elif tag == "br":
            self.text.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre" and self._pre is not None:
            self.code.append((self._language, "".join(self._pre).removesuffix("\n")))
            self._pre = None
            self.text.append("\n")
        elif tag == "strong" and self._strong is not None:
            self.bold.append("".join(self._strong))
            self._strong = None
        elif tag in ("p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "tr"):
            self.text.append("\n")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._pre is not None:
            self._pre.append(data)
        if self._strong is not None:
            self._strong.append(data)
