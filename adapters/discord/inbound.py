"""Discord messages and slash-command interactions to neutral :class:`InboundMessage`: pure functions.

Everything here reads parsed discord.py objects plus the bot's identity, and does no I/O, so it is
unit-tested from payloads without a connection.

Where a message lives (``chat_id``) is the channel it was posted in: the DM channel, the guild text
channel, or **the thread**. A thread is its own chat, hence its own session, and ``thread_id`` stays
None: on Discord a thread is a channel, so a reply sent to ``chat_id`` lands in the thread. (An
address that does carry a ``thread_id`` is honoured by the adapter: the message goes there.)

``addressed`` (is the message meant for the bot?) is decided here, because only the adapter knows a
thread's parent channel: a DM; a mention of the bot (``<@id>``, or its managed role, which
Discord's autocomplete often picks instead of the user); a reply to one of the bot's messages; or a
channel listed in ``free_response`` (by id; a thread counts as its parent channel's). The gateway
applies ``require_mention`` to ``addressed`` and nothing else.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import discord

from adapters.base import Attachment, ChatType, InboundMessage
from adapters.names import clean_name

from .commands import command_text
from .settings import PLATFORM

BUTTON = 2  # a message component's type: a button

# Message types people write; everything else (joins, pins, boosts, thread created...) is a system
# message. Slash-command responses are the bot's own and are filtered as bot messages.
_PERSON_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
_USER_MENTION = re.compile(r"<@!?(\d+)>")


@dataclass(frozen=True)
class BotIdentity:
    """Who "the bot" is, from READY: needed to tell mentions of it and replies to it."""

    id: int
    name: str


def to_inbound(
    message: discord.Message, me: BotIdentity, *, free_response: Collection[str] = frozenset()
) -> InboundMessage | None:
    """The neutral form of ``message``, or None when it carries nothing for the bot.

    None for: bots and webhooks (the bot itself included), system messages, and messages with
    neither text nor attachments (in a guild without the message-content intent, Discord sends
    the content of messages that do not mention the bot as empty). Stickers arrive as attachments
    (a static one is an image), a poll as a line of text: a person is never left without an answer.
    """
    if message.author.bot or message.webhook_id is not None or message.type not in _PERSON_TYPES:
        return None
    attachments = (*(_attachment(a) for a in message.attachments), *(_sticker(s) for s in message.stickers))
    poll = _poll_text(message.poll) if message.poll is not None else None
    if not message.content and not attachments and poll is None:
        return None
    channel = message.channel
    # Not ``message.guild is None``: a guild not in the cache yet (or unavailable) has no Guild
    # object either, and its messages must not pass as DMs. A DM always parses as a DMChannel.
    direct = isinstance(channel, discord.DMChannel)
    reference = message.reference
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(channel.id),
        chat_type=ChatType.DIRECT if direct else ChatType.GROUP,
        user_id=str(message.author.id),
        user_name=user_name(message.author),
        message_id=str(message.id),
        text="\n".join(part for part in (readable_text(message, me), poll) if part),
        timestamp=message.created_at.timestamp(),
        reply_to_id=str(reference.message_id) if reference and reference.message_id else None,
        addressed=direct or is_addressed(message, me) or _free_response(channel, free_response),
        chat_title=chat_title(channel),
        attachments=attachments,
        server_id=_server_id(message.guild.id if message.guild else getattr(channel, "guild_id", None)),
        parent_chat_id=_parent_id(channel),
    )


def interaction_to_inbound(interaction: discord.Interaction[Any]) -> InboundMessage | None:
    """A slash command (chat-input application command) as the message ``/name args``, and a press
    of one of the bot's buttons as the message its ``custom_id`` holds (a command; ``reply_to_id``:
    the message with the buttons).

    ``message_id`` is the interaction id: that is what the gateway passes back as ``reply_to``, and
    how the adapter finds the interaction to answer. Other interaction kinds (select menus, context
    menus, autocomplete) are None: Herald registers none of them.
    """
    data = interaction.data
    if data is None or interaction.user.bot:
        return None
    reply_to_id = None
    if interaction.type is discord.InteractionType.application_command:
        if data.get("type", 1) != 1:  # 1: a slash command, not a context menu
            return None
        text = command_text(data)
    elif interaction.type is discord.InteractionType.component:
        custom_id = data.get("custom_id")
        is_command = isinstance(custom_id, str) and custom_id.startswith("/")
        if data.get("component_type") != BUTTON or not is_command:
            return None
        text = str(custom_id)
        reply_to_id = str(interaction.message.id) if interaction.message is not None else None
    else:
        return None
    channel = interaction.channel
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(interaction.channel_id),
        chat_type=ChatType.DIRECT if interaction.guild_id is None else ChatType.GROUP,
        user_id=str(interaction.user.id),
        user_name=user_name(interaction.user),
        message_id=str(interaction.id),
        text=text,
        timestamp=interaction.created_at.timestamp(),
        reply_to_id=reply_to_id,
        addressed=True,
        chat_title=chat_title(channel) if channel is not None else None,
        server_id=_server_id(interaction.guild_id),
        parent_chat_id=_parent_id(channel),
    )


def _server_id(guild_id: int | None) -> str | None:
    return str(guild_id) if guild_id is not None else None


def _parent_id(channel: object) -> str | None:
    """A thread's parent channel (a thread is a chat of its own; allowlists name the channel)."""
    if isinstance(channel, discord.Thread) and channel.parent_id is not None:
        return str(channel.parent_id)
    return None


def is_addressed(message: discord.Message, me: BotIdentity) -> bool:
    """A mention of the bot or of its managed role, or a reply to one of its messages."""
    if any(user.id == me.id for user in message.mentions) or me.id in message.raw_mentions:
        return True
    own_role = _own_role_id(message)
    if own_role is not None and own_role in message.raw_role_mentions:
        return True
    reference = message.reference
    replied = reference.resolved if reference is not None else None
    return isinstance(replied, discord.Message) and replied.author.id == me.id


def readable_text(message: discord.Message, me: BotIdentity) -> str:
    """The content with the bot's own mention removed and other people's shown as ``@name``.

    ``<@123> hello`` → ``hello``: the mention is how the message was addressed, not what it says.
    Other user mentions become the names the sender saw, so the model reads names, not ids. A
    message that was nothing but the mention keeps it as ``@BotName`` (never empty text).
    """
    names = {user.id: user_name(user) for user in message.mentions}
    role = _own_role_id(message)
    # The bot's own mentions go, with the blanks around them (and only those: code keeps its
    # indentation); other people's become their names.
    own = rf"<@!?{me.id}>" + (rf"|<@&{role}>" if role is not None else "")
    text = re.sub(rf"[ \t]*(?:{own})[ \t]*", " ", message.content)

    def named(match: re.Match[str]) -> str:
        name = names.get(int(match.group(1)))
        return f"@{name}" if name else match.group(0)

    text = _USER_MENTION.sub(named, text).strip()
    if not text and not message.attachments and message.content:
        return f"@{me.name}"
    return text


def user_name(user: discord.abc.User) -> str:
    """The name Discord shows for ``user`` here (server nickname, global name, username)."""
    return clean_name(user.display_name) or clean_name(user.name) or str(user.id)


def chat_title(channel: object) -> str | None:
    """``#channel`` for a guild channel, the thread's name for a thread, None for a DM."""
    if isinstance(channel, discord.Thread):
        return clean_name(channel.name) or None
    if isinstance(channel, discord.abc.GuildChannel):
        return f"#{clean_name(channel.name)}"
    return None


def attachment_kind(content_type: str | None, *, voice: bool = False) -> str:
    if voice:
        return "voice"
    major = (content_type or "").partition("/")[0]
    return {"image": "photo", "audio": "audio", "video": "video"}.get(major, "document")


# --- helpers ------------------------------------------------------------------------------------


def _attachment(attachment: discord.Attachment) -> Attachment:
    """The attachment's CDN ``url`` is its ``file_id``: that is what downloads it (it expires). Discord
    leaves ``content_type`` out for some uploads: the file name's suffix says then."""
    mime = attachment.content_type or mimetypes.guess_type(attachment.filename)[0]
    kind = attachment_kind(mime, voice=attachment.is_voice_message())
    return Attachment(kind, attachment.url, attachment.filename, mime, attachment.size)


_STICKER_TYPES = {
    discord.StickerFormatType.png: "image/png",
    discord.StickerFormatType.apng: "image/png",  # the first frame: a still
    discord.StickerFormatType.gif: "image/gif",
    discord.StickerFormatType.lottie: "application/json",  # a vector animation: nothing reads it
}


def _sticker(sticker: discord.StickerItem) -> Attachment:
    return Attachment("sticker", sticker.url, sticker.name, _STICKER_TYPES.get(sticker.format))


def _poll_text(poll: discord.Poll) -> str:
    answers = " / ".join(answer.text for answer in poll.answers)
    return f"[poll: {poll.question} — {answers}]"


def _own_role_id(message: discord.Message) -> int | None:
    """The bot's managed role in the message's guild (mentioning it means mentioning the bot)."""
    guild = message.guild
    role = guild.self_role if guild is not None else None
    return role.id if role is not None else None


def _free_response(channel: object, channels: Collection[str]) -> bool:
    """Whether the channel answers every message (a thread inherits its parent's setting)."""
    if not channels:
        return False
    if str(getattr(channel, "id", "")) in channels:
        return True
    return isinstance(channel, discord.Thread) and str(channel.parent_id) in channels
