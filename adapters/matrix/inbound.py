"""Reading a ``/sync`` answer: pure functions from Matrix's JSON to what the adapter acts on.

A sync answer holds, per joined room, the new timeline events (and state), and the rooms the bot
was invited to. :func:`read_sync` sorts them into :class:`SyncBatch`; :func:`to_inbound` turns one
message event into the contract's :class:`InboundMessage` once the adapter knows the room (its
members) and whether a reply answers the bot.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapters.base import Attachment, ChatType, InboundMessage
from adapters.names import clean_name

from .settings import PLATFORM

ENCRYPTION = "m.room.encryption"
MEMBER = "m.room.member"
MESSAGE = "m.room.message"
ENCRYPTED = "m.room.encrypted"
# msgtype -> Attachment.kind; a voice message is an m.audio with the MSC3245 voice marker.
MEDIA_KINDS = {"m.image": "photo", "m.file": "document", "m.audio": "audio", "m.video": "video"}
TEXT_TYPES = ("m.text", "m.emote")
VOICE_MARKERS = ("org.matrix.msc3245.voice", "m.voice")
_FALLBACK = re.compile(r"\A(?:> [^\n]*\n)+\n?")  # the quoted lines a legacy reply starts with


@dataclass(frozen=True)
class Invite:
    room_id: str
    inviter: str | None  # who sent the invite (None: the invite state did not say)
    encrypted: bool


@dataclass(frozen=True)
class RoomEvents:
    """A joined room's news in one sync."""

    room_id: str
    timeline: tuple[Mapping[str, Any], ...]
    joined: dict[str, str] = field(default_factory=dict)  # members that joined (id -> display name)
    left: frozenset[str] = frozenset()  # members that left, were kicked or banned
    member_count: int | None = None  # the room summary's m.joined_member_count, when sent
    encrypted: bool = False  # encryption is (now) on in this room
    gap: str | None = None  # the timeline was cut (``limited``): the ``prev_batch`` to page back from


@dataclass(frozen=True)
class SyncBatch:
    next_batch: str
    rooms: tuple[RoomEvents, ...]
    invites: tuple[Invite, ...]


def read_sync(answer: Mapping[str, Any]) -> SyncBatch:
    """The parts of a sync answer the adapter acts on (ValueError when it has no ``next_batch``)."""
    token = answer.get("next_batch")
    if not isinstance(token, str) or not token:
        raise ValueError("a sync answer without next_batch")
    rooms = _mapping(answer.get("rooms"))
    joined = [_room(room_id, _mapping(room)) for room_id, room in _mapping(rooms.get("join")).items()]
    invites = [_invite(room_id, _mapping(room)) for room_id, room in _mapping(rooms.get("invite")).items()]
    return SyncBatch(token, tuple(joined), tuple(invites))


def _room(room_id: str, room: Mapping[str, Any]) -> RoomEvents:
    timeline = tuple(e for e in _list(_mapping(room.get("timeline")).get("events")) if isinstance(e, dict))
    state = tuple(e for e in _list(_mapping(room.get("state")).get("events")) if isinstance(e, dict))
    joined: dict[str, str] = {}
    left: set[str] = set()
    encrypted = False
    for event in (*state, *timeline):
        kind, key = event.get("type"), event.get("state_key")
        if kind == ENCRYPTION and isinstance(key, str):
            encrypted = True
        elif kind == MEMBER and isinstance(key, str):
            content = _mapping(event.get("content"))
            if content.get("membership") == "join":
                joined[key] = str(content.get("displayname") or key)
                left.discard(key)
            elif content.get("membership") in ("leave", "ban"):
                left.add(key)
                joined.pop(key, None)
    count = _mapping(room.get("summary")).get("m.joined_member_count")
    cut = _mapping(room.get("timeline"))
    gap = cut.get("prev_batch") if cut.get("limited") and isinstance(cut.get("prev_batch"), str) else None
    return RoomEvents(
        room_id, timeline, joined, frozenset(left), count if isinstance(count, int) else None, encrypted, gap
    )


def _invite(room_id: str, room: Mapping[str, Any]) -> Invite:
    events = [e for e in _list(_mapping(room.get("invite_state")).get("events")) if isinstance(e, dict)]
    encrypted = any(e.get("type") == ENCRYPTION for e in events)
    inviter = None
    for event in events:
        content = _mapping(event.get("content"))
        if event.get("type") == MEMBER and content.get("membership") == "invite":
            inviter = event.get("sender") if isinstance(event.get("sender"), str) else None
    return Invite(room_id, inviter, encrypted)


@dataclass(frozen=True)
class Relations:
    """How a message relates to others: its thread, the message it answers, whether it is an edit."""

    thread_id: str | None
    reply_to: str | None  # a real reply (not a thread's fallback)
    edit: bool


def relations(content: Mapping[str, Any]) -> Relations:
    relates = _mapping(content.get("m.relates_to"))
    in_reply = _mapping(relates.get("m.in_reply_to")).get("event_id")
    thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    falling_back = thread is not None and bool(relates.get("is_falling_back"))
    return Relations(
        thread if isinstance(thread, str) else None,
        in_reply if isinstance(in_reply, str) and not falling_back else None,
        relates.get("rel_type") == "m.replace",
    )


def is_message(event: Mapping[str, Any], me: str) -> bool:
    """A person's message the bot may answer: not its own, not a notice (bots answer no bots), not an
    edit (the original was answered), not a redacted one."""
    content = _mapping(event.get("content"))
    return (
        event.get("type") == MESSAGE
        and event.get("sender") != me
        and isinstance(event.get("event_id"), str)
        and (content.get("msgtype") in TEXT_TYPES or content.get("msgtype") in MEDIA_KINDS)
        and not relations(content).edit
    )


def since_invited(events: Sequence[Mapping[str, Any]], me: str) -> list[Mapping[str, Any]]:
    """The events after the bot's latest invite among ``events`` (all of them when there is none).

    A room the bot has just joined comes with its recent history (Synapse shows a newly joined room's
    last events, and its ``/messages`` pages back through history the room lets members see): what was
    written before anyone asked the bot in is not for it to answer. What came after the invite (a
    direct chat's first words, typed before the bot joined) is."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if (
            event.get("type") == MEMBER
            and event.get("state_key") == me
            and _mapping(event.get("content")).get("membership") == "invite"
        ):
            return list(events[index + 1 :])
    return list(events)


def mentions(content: Mapping[str, Any], me: str, my_name: str) -> bool:
    """The message mentions the bot: in ``m.mentions`` (intentional mentions), or, from a client that
    sends none, by its user id or display name in the text."""
    intended = content.get("m.mentions")
    if isinstance(intended, dict):
        users = intended.get("user_ids")
        return isinstance(users, list) and me in users
    text = f"{content.get('body', '')} {content.get('formatted_body', '')}"
    return me in text or (bool(my_name) and my_name.casefold() in text.casefold())


def command_of(text: str, commands: Collection[str]) -> bool:
    """``/name ...`` for a command of the published table."""
    if not text.startswith("/"):
        return False
    return text[1:].split(maxsplit=1)[0].casefold() in commands if len(text) > 1 else False


def to_inbound(
    room_id: str,
    event: Mapping[str, Any],
    *,
    direct: bool,
    sender_name: str,
    addressed: bool,
) -> InboundMessage:
    """One message event (:func:`is_message`) as the contract's message. ``addressed`` is decided
    by the adapter (mention, reply to the bot, command); a direct room's messages always are."""
    content = _mapping(event.get("content"))
    related = relations(content)
    body = str(content.get("body", ""))
    msgtype = content.get("msgtype")
    attachments: tuple[Attachment, ...] = ()
    text = _FALLBACK.sub("", body) if related.reply_to else body
    if msgtype in MEDIA_KINDS:
        info = _mapping(content.get("info"))
        name = content.get("filename") if isinstance(content.get("filename"), str) else body
        kind = MEDIA_KINDS[str(msgtype)]
        if kind == "audio" and any(marker in content for marker in VOICE_MARKERS):
            kind = "voice"
        url = content.get("url")  # an encrypted file has ``file`` instead: not readable here
        size = info.get("size")
        attachments = (
            Attachment(
                kind,
                url if isinstance(url, str) and url.startswith("mxc://") else "",
                name=str(name),
                mime_type=str(info["mimetype"]) if isinstance(info.get("mimetype"), str) else None,
                size=size if isinstance(size, int) else None,
            ),
        )
        text = body if name != body else ""  # a caption (the body differs from the file's name)
    if msgtype == "m.emote":
        text = f"* {sender_name} {text}"
    stamp = event.get("origin_server_ts")
    return InboundMessage(
        platform=PLATFORM,
        chat_id=room_id,
        chat_type=ChatType.DIRECT if direct else ChatType.GROUP,
        user_id=str(event["sender"]),
        user_name=clean_name(sender_name) or str(event["sender"]),
        message_id=str(event["event_id"]),
        text=text,
        timestamp=stamp / 1000 if isinstance(stamp, int | float) else 0.0,
        thread_id=related.thread_id,
        reply_to_id=related.reply_to,
        addressed=direct or addressed,
        attachments=attachments,
        parent_chat_id=room_id if related.thread_id else None,
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
