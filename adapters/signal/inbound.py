"""signal-cli's envelopes (what its event stream carries) as :class:`InboundMessage`: pure functions.

An envelope is ``{"envelope": {"sourceNumber", "sourceUuid", "sourceName", "timestamp",
"dataMessage": {...}}, "account": ...}`` (signal-cli-jsonrpc(5)). Ids, as Herald names them:

- a person is their phone number, or their account UUID when Signal does not share the number;
- a direct chat is the person's id; a group is ``group:`` plus signal-cli's base64 group id;
- a message is ``TIMESTAMP:AUTHOR``: Signal names a message by its author and the millisecond it was
  sent, which is also what a quote (a reply) must give. A redelivered envelope has the same id, so
  the inbox keeps the first. The bot's own messages are ``TIMESTAMP:ACCOUNT``.

Mentions are ranges over U+FFFC (UTF-16 units) naming a member; the text the model sees has
``@name`` there. A message is addressed to the bot in a group when it mentions the bot, quotes one
of its messages, or is one of its commands.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from adapters.base import Attachment, ChatType, InboundMessage
from adapters.names import clean_name
from adapters.text.units import from_utf16_offset

from .settings import PLATFORM

GROUP_PREFIX = "group:"
MENTION = "\ufffc"


@dataclass(frozen=True)
class Me:
    """The bot's account: its number, its UUID once known, the name people see."""

    number: str
    uuid: str | None = None
    name: str = "Herald"

    def is_me(self, number: object, uuid: object) -> bool:
        return (bool(number) and number == self.number) or (bool(uuid) and uuid == self.uuid)


def message_id(timestamp: int, author: str) -> str:
    return f"{timestamp}:{author}"


def split_id(message: str) -> tuple[int, str] | None:
    """``(timestamp, author)`` of an id made by :func:`message_id` (None for anything else)."""
    timestamp, _, author = message.partition(":")
    return (int(timestamp), author) if timestamp.isdigit() and author else None


def person(number: object, uuid: object) -> str | None:
    """How Herald names a person: the number when Signal shares it, else the UUID."""
    for value in (number, uuid):
        if isinstance(value, str) and value:
            return value
    return None


def to_inbound(payload: Mapping[str, Any], me: Me, commands: Collection[str]) -> InboundMessage | None:
    """The message a person sent, or None for anything else (receipts, typing, reactions, the bot's
    own messages, edits, stories, group updates without words or files)."""
    envelope = payload.get("envelope")
    if not isinstance(envelope, dict):
        return None
    data = envelope.get("dataMessage")
    source = person(envelope.get("sourceNumber"), envelope.get("sourceUuid")) or _text(envelope.get("source"))
    if not isinstance(data, dict) or not source or me.is_me(envelope.get("sourceNumber"),
                                                          envelope.get("sourceUuid")):  # fmt: skip
        return None
    if data.get("reaction") or data.get("remoteDelete"):
        return None
    timestamp = data.get("timestamp") or envelope.get("timestamp")
    if not isinstance(timestamp, int):
        return None
    text, mentioned = _with_names(_text(data.get("message")), data.get("mentions"), me)
    attachments = tuple(_attachment(item) for item in data.get("attachments") or () if isinstance(item, dict))
    if not text.strip() and not attachments:
        return None
    group = data.get("groupInfo")
    group_id = _text(group.get("groupId")) if isinstance(group, dict) else ""
    reply_to, to_me = _quoted(data.get("quote"), me)
    command = _command(text, commands)
    name = clean_name(_text(envelope.get("sourceName")) or source)
    return InboundMessage(
        platform=PLATFORM,
        chat_id=f"{GROUP_PREFIX}{group_id}" if group_id else source,
        chat_type=ChatType.GROUP if group_id else ChatType.DIRECT,
        user_id=source,
        user_name=name,
        message_id=message_id(timestamp, source),
        text=text,
        timestamp=timestamp / 1000,
        reply_to_id=reply_to,
        addressed=not group_id or mentioned or to_me or command,
        chat_title=clean_name(_text(group.get("groupName"))) or None if isinstance(group, dict) else None,
        attachments=attachments,
    )


def _command(text: str, commands: Collection[str]) -> bool:
    """``/name …`` for one of the bot's commands (any ``/word`` before the gateway published them)."""
    words = text[1:].split(maxsplit=1) if text.startswith("/") else []
    return bool(words) and (not commands or words[0].lower() in commands)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _with_names(text: str, mentions: object, me: Me) -> tuple[str, bool]:
    """``text`` with each mention's U+FFFC replaced by ``@name``; whether one names the bot."""
    found: list[tuple[int, int, str]] = []
    mentioned = False
    for item in mentions if isinstance(mentions, list) else ():
        if not isinstance(item, dict):
            continue
        try:
            start = from_utf16_offset(text, int(item.get("start", -1)))
            end = from_utf16_offset(text, int(item.get("start", -1)) + int(item.get("length", 0)))
        except (ValueError, TypeError):
            continue
        if me.is_me(item.get("number"), item.get("uuid")):
            mentioned, label = True, me.name
        else:
            label = person(item.get("number"), item.get("uuid")) or "someone"
        found.append((start, end, f"@{label}"))
    for start, end, label in sorted(found, reverse=True):
        text = text[:start] + label + text[end:]
    return text, mentioned


def _quoted(quote: object, me: Me) -> tuple[str | None, bool]:
    """The id of the quoted message, and whether it is the bot's."""
    if not isinstance(quote, dict) or not isinstance(quote.get("id"), int):
        return None, False
    number, uuid = quote.get("authorNumber"), quote.get("authorUuid")
    if me.is_me(number, uuid):
        return message_id(quote["id"], me.number), True
    author = person(number, uuid) or _text(quote.get("author"))
    return (message_id(quote["id"], author), False) if author else (None, False)


def _attachment(item: Mapping[str, Any]) -> Attachment:
    """An attachment by its signal-cli id (``getAttachment`` fetches it). A voice note is audio
    without a file name (what Signal's apps record)."""
    mime = _text(item.get("contentType")) or "application/octet-stream"
    name = _text(item.get("filename")) or None
    major = mime.split("/", 1)[0]
    if major == "image":
        kind = "animation" if mime == "image/gif" else "photo"
    elif major == "audio":
        kind = "audio" if name else "voice"
    elif major == "video":
        kind = "video"
    else:
        kind = "document"
    size = item.get("size")
    return Attachment(kind, _text(item.get("id")), name, mime, size if isinstance(size, int) else None)
