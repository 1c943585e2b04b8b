"""Slack events and slash commands as neutral :class:`InboundMessage` (pure: no I/O).

Addresses: ``chat_id`` is the channel (``C…``, ``G…``, ``D…`` for a DM), ``thread_id`` the thread's
root ``ts`` (a thread is its own session, and replies stay in it), ``message_id`` the message's ``ts``
(unique in its channel, so the same message from the socket, the Events API, a retry or a catch-up is
one message), ``server_id`` the workspace (``T…``). A slash command has no ``ts``: its id is
``command:<trigger_id>``, and its reply goes to the command's channel.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.base import Attachment, ChatType, InboundMessage

from .settings import PLATFORM

# Message subtypes that are something a person wrote; every other one (joins, edits, deletions, bot
# messages, topic changes) is not handed over.
PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
COMMAND_PREFIX = "command:"
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL_MENTION = re.compile(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>")
_LINK = re.compile(r"<((?:https?|mailto):[^>|]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is (``auth.test``): its member id, which mentions carry, and its bot id."""

    user_id: str
    bot_id: str | None
    team_id: str | None


def chat_type(channel: str, channel_type: str | None) -> ChatType:
    """``im`` (or a ``D…`` channel) is a direct chat; channels, private channels and group DMs are
    shared."""
    if channel_type == "im" or (channel_type is None and channel.startswith("D")):
        return ChatType.DIRECT
    return ChatType.GROUP


def is_from_person(event: Mapping[str, Any], me: BotIdentity) -> bool:
    """A message a person wrote (not the bot's own, not another bot's, not a system message)."""
    if event.get("type") not in ("message", "app_mention") or event.get("subtype") not in PERSON_SUBTYPES:
        return False
    if event.get("bot_id") or event.get("user") in (None, me.user_id):
        return False
    return isinstance(event.get("ts"), str) and isinstance(event.get("channel"), str)


def to_inbound(
    event: Mapping[str, Any], me: BotIdentity, *, user_name: str, team_id: str | None = None
) -> InboundMessage | None:
    """The message in a ``message``/``app_mention`` event, or None when it is nothing for the bot."""
    if not is_from_person(event, me):
        return None
    channel, ts = str(event["channel"]), str(event["ts"])
    kind = chat_type(channel, event.get("channel_type"))
    raw = str(event.get("text") or "")
    mentioned = f"<@{me.user_id}" in raw
    thread = event.get("thread_ts")
    return InboundMessage(
        platform=PLATFORM,
        chat_id=channel,
        chat_type=kind,
        user_id=str(event["user"]),
        user_name=user_name,
        message_id=ts,
        text=plain_text(raw, me.user_id),
        timestamp=float(ts),
        thread_id=str(thread) if thread else None,
        addressed=kind is ChatType.DIRECT or mentioned,
        attachments=tuple(attachment(file) for file in event.get("files") or () if isinstance(file, dict)),
        server_id=str(event.get("team") or team_id or "") or None,
    )


def command_to_inbound(
    payload: Mapping[str, Any], *, slash_command: str, user_name: str
) -> InboundMessage | None:
    """A slash command as the text ``/name args``: ``/herald new`` → ``/new``; any other command the
    app has (``/new``) is taken as it is. None when the payload is not a command."""
    command, trigger = payload.get("command"), payload.get("trigger_id")
    channel, user = payload.get("channel_id"), payload.get("user_id")
    if not all(isinstance(value, str) and value for value in (command, trigger, channel, user)):
        return None
    args = str(payload.get("text") or "").strip()
    if command == slash_command:
        name, _, rest = args.partition(" ")
        text = f"/{name or 'help'} {rest}".strip()
    else:
        text = f"{command} {args}".strip()
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(channel),
        chat_type=chat_type(str(channel), "im" if str(channel).startswith("D") else None),
        user_id=str(user),
        user_name=user_name,
        message_id=f"{COMMAND_PREFIX}{trigger}",
        text=text,
        timestamp=0.0,
        addressed=True,
        server_id=str(payload.get("team_id") or "") or None,
    )


def plain_text(text: str, bot_user_id: str) -> str:
    """Slack's markup as a person reads it: the bot's mention dropped, other mentions as ``@U…``,
    links as ``text (url)``, entities unescaped."""
    text = _USER_MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else f"@{m.group(1)}", text)
    text = _CHANNEL_MENTION.sub(lambda m: f"#{m.group(2) or m.group(1)}", text)
    text = _SPECIAL.sub(lambda m: f"@{m.group(1)}", text)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
    return html.unescape(re.sub(r"[ \t]{2,}", " ", text)).strip()


def attachment(file: Mapping[str, Any]) -> Attachment:
    """A file of a message. ``file_id`` is its private download URL (fetched with the bot token)."""
    mime = str(file.get("mimetype") or "") or None
    if file.get("subtype") == "slack_audio" or (mime or "").startswith("audio/"):
        kind = "voice"
    elif (mime or "").startswith("image/"):
        kind = "photo"
    elif (mime or "").startswith("video/"):
        kind = "video"
    else:
        kind = "document"
    url = file.get("url_private_download") or file.get("url_private") or ""
    size = file.get("size")
    return Attachment(
        kind=kind,
        file_id=str(url),
        name=str(file.get("name") or "") or None,
        mime_type=mime,
        size=size if isinstance(size, int) else None,
    )
