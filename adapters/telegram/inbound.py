"""Telegram messages to neutral :class:`InboundMessage`: pure functions, no I/O, no bot object.

Everything here works on a parsed ``telegram.Message`` plus the bot's identity, so it is unit-tested
from ``Message.de_json(...)`` dicts. The one judgement call is ``addressed`` (is the message meant
for the bot?), which the gateway uses for ``require_mention`` in groups; the rules follow how
Telegram itself routes commands, mentions and replies under group privacy mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import CallbackQuery, Chat, Location, Message, MessageEntity, Sticker, User
from telegram.constants import MessageEntityType

from adapters.base import Attachment, ChatType, InboundMessage
from adapters.names import clean_name

from .settings import PLATFORM

PRESS_PREFIX = "press:"  # a button press's message_id: the callback query's id behind it (never a number)

_CHAT_TYPES = {
    Chat.PRIVATE: ChatType.DIRECT,
    Chat.GROUP: ChatType.GROUP,
    Chat.SUPERGROUP: ChatType.GROUP,
    Chat.CHANNEL: ChatType.CHANNEL,
}


@dataclass(frozen=True)
class BotIdentity:
    """Who "the bot" is, from ``getMe``: needed to tell mentions, replies and commands aimed at it."""

    id: int
    username: str


@dataclass(frozen=True)
class _Command:
    """A leading ``/command[@bot]`` entity."""

    length: int  # UTF-16 units of the whole ``/cmd@bot`` token
    name: str  # without the slash and the @bot part
    target: str | None  # the @bot part, without "@"


def to_inbound(message: Message, me: BotIdentity) -> InboundMessage | None:
    """The neutral form of ``message``, or None when it carries nothing for the bot.

    None for: messages from bots (the bot itself included; an anonymous group admin, who writes
    through Telegram's GroupAnonymousBot on behalf of the group, is a person) and service messages
    (members joining, pins, topic changes...). Everything a person sends gets an answer: what has
    words (a location, a contact, a poll, a dice roll) arrives as a line of text, everything else as
    an attachment (a round video, a GIF, a story...) that the gateway answers for.
    """
    sender = _sender(message, me)
    if sender is None:
        return None
    attachments = _attachments(message)
    raw_text = message.text if message.text is not None else (message.caption or _described(message))
    if not raw_text and not attachments:
        return None
    user_id, user_name = sender
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(message.chat.id),
        chat_type=_CHAT_TYPES.get(message.chat.type, ChatType.GROUP),
        user_id=user_id,
        user_name=user_name,
        message_id=str(message.message_id),
        text=_without_own_username(raw_text, _leading_command(message), me),
        timestamp=message.date.timestamp(),
        thread_id=str(message.message_thread_id)
        if message.is_topic_message and message.message_thread_id is not None
        else None,
        reply_to_id=str(reply.message_id) if (reply := _real_reply(message)) is not None else None,
        addressed=is_addressed(message, me),
        chat_title=message.chat.title,
        attachments=attachments,
    )


def press_to_inbound(query: CallbackQuery, me: BotIdentity, now: float) -> InboundMessage | None:
    """A press of one of the bot's inline buttons as the presser sending the button's command (see
    ``adapters.base``, Buttons); None for what no button of ours sends (data not a command, a message
    too old to be shown, a bot)."""
    message = query.message
    data = query.data
    if not isinstance(message, Message) or not data or not data.startswith("/") or query.from_user.is_bot:
        return None
    if message.from_user is not None and message.from_user.id != me.id:
        return None
    return InboundMessage(
        platform=PLATFORM,
        chat_id=str(message.chat.id),
        chat_type=_CHAT_TYPES.get(message.chat.type, ChatType.GROUP),
        user_id=str(query.from_user.id),
        user_name=display_name(query.from_user),
        message_id=f"{PRESS_PREFIX}{query.id}",
        text=data,
        timestamp=now,
        thread_id=str(message.message_thread_id)
        if message.is_topic_message and message.message_thread_id is not None
        else None,
        reply_to_id=str(message.message_id),
        addressed=True,
        chat_title=message.chat.title,
    )


def press_id(message_id: str | None) -> str | None:
    """The callback query id when ``message_id`` is a button press's, else None."""
    if message_id is None or not message_id.startswith(PRESS_PREFIX):
        return None
    return message_id[len(PRESS_PREFIX) :]


def display_name(who: User | Chat) -> str:
    """A readable one-line name: a chat's title, else first + last name, else @username, else the id.

    Names are user-controlled and end up in prompts and logs, so control and formatting characters
    (bidi overrides, zero-width tricks) are dropped, whitespace collapsed and the length capped.
    """
    title = who.title if isinstance(who, Chat) else None
    name = clean_name(title or " ".join(part for part in (who.first_name, who.last_name) if part))
    if not name and who.username:
        name = clean_name(f"@{who.username}")
    return name or str(who.id)


def is_addressed(message: Message, me: BotIdentity) -> bool:
    """Whether a message is meant for the bot: always in a direct chat; in groups, see below.

    True for a ``@bot`` mention, a text_mention of the bot's account, a reply to one of its
    messages, a leading command not aimed at another bot, or ``/cmd@bot`` anywhere. A message
    starting with a command aimed at another bot (``/help@other_bot``) is not for us, whatever
    else it contains.
    """
    if message.chat.type == Chat.PRIVATE:
        return True
    command = _leading_command(message)
    if command is not None:
        return command.target is None or command.target.lower() == me.username.lower()
    reply = _real_reply(message)
    if reply is not None and reply.from_user is not None and reply.from_user.id == me.id:
        return True
    handle = f"@{me.username}".lower()
    for entity, text in _entities(message).items():
        if entity.type == MessageEntityType.MENTION and text.lower() == handle:
            return True
        if entity.type == MessageEntityType.TEXT_MENTION and entity.user and entity.user.id == me.id:
            return True
        if entity.type == MessageEntityType.BOT_COMMAND and text.lower().endswith(handle):
            return True
    return False


# --- helpers ------------------------------------------------------------------------------------


def _sender(message: Message, me: BotIdentity) -> tuple[str, str] | None:
    """(user_id, user_name) of whoever wrote, or None for bots.

    A message sent on behalf of a chat (an anonymous admin, a channel, a linked channel's post) is
    attributed to that chat, so it can never pass as one of the chat's members.
    """
    if message.sender_chat is not None:
        chat = message.sender_chat
        return str(chat.id), display_name(chat)
    user = message.from_user
    if user is None or user.is_bot or user.id == me.id:
        return None
    return str(user.id), display_name(user)


def _without_own_username(text: str, command: _Command | None, me: BotIdentity) -> str:
    """``/cmd@this_bot args`` → ``/cmd args``, so the gateway's command table sees one spelling.

    Any other text, commands aimed at other bots included, is returned unchanged.
    """
    if command is None or command.target is None or command.target.lower() != me.username.lower():
        return text
    return f"/{command.name}{_utf16_slice(text, command.length)}"


def _real_reply(message: Message) -> Message | None:
    """The message replied to, unless it is a forum topic's root.

    In a forum topic every message without an explicit reply "replies" to the topic-created
    service message; that is where the message lives, not what it answers.
    """
    reply = message.reply_to_message
    if reply is None or reply.forum_topic_created is not None:
        return None
    return reply


def _entities(message: Message) -> dict[MessageEntity, str]:
    return message.parse_entities() if message.text is not None else message.parse_caption_entities()


def _leading_command(message: Message) -> _Command | None:
    entities = message.entities if message.text is not None else message.caption_entities
    for entity in entities:
        if entity.type == MessageEntityType.BOT_COMMAND and entity.offset == 0:
            token = _entities(message)[entity]
            name, _, target = token[1:].partition("@")
            return _Command(entity.length, name, target or None)
    return None


# Content with no file Herald reads and no words: named, so the person is told it was not read.
_UNREAD = ("game", "invoice", "story", "paid_media", "checklist", "giveaway")


def _attachments(message: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if message.animation is not None:  # Telegram sets ``document`` too, for old clients: one of them
        gif = message.animation
        found.append(Attachment("animation", gif.file_id, gif.file_name, gif.mime_type, gif.file_size))
    elif message.document is not None:
        doc = message.document
        found.append(Attachment("document", doc.file_id, doc.file_name, doc.mime_type, doc.file_size))
    photo = message.photo or (message.live_photo.photo if message.live_photo is not None else ())
    if photo:  # a live photo is read as its still picture
        largest = max(photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        found.append(Attachment("photo", largest.file_id, None, "image/jpeg", largest.file_size))
    if message.audio is not None:
        audio = message.audio
        found.append(Attachment("audio", audio.file_id, audio.file_name, audio.mime_type, audio.file_size))
    if message.voice is not None:
        voice = message.voice
        found.append(Attachment("voice", voice.file_id, None, voice.mime_type, voice.file_size))
    if message.video is not None:
        video = message.video
        found.append(Attachment("video", video.file_id, video.file_name, video.mime_type, video.file_size))
    if message.video_note is not None:
        note = message.video_note
        found.append(Attachment("video_note", note.file_id, None, "video/mp4", note.file_size))
    if message.sticker is not None:
        sticker = message.sticker
        found.append(Attachment("sticker", sticker.file_id, None, _sticker_mime(sticker), sticker.file_size))
    found.extend(Attachment(kind, "") for kind in _UNREAD if getattr(message, kind, None) is not None)
    return tuple(found)


def _described(message: Message) -> str:
    """The words of a message that has no text but says something: a place, a contact, a poll, a roll
    of the dice ("" for anything else)."""
    if message.venue is not None:
        venue = message.venue
        return f"[place: {venue.title}, {venue.address} ({_where(venue.location)})]"
    if message.location is not None:
        live = "live location" if message.location.live_period else "location"
        return f"[{live}: {_where(message.location)}]"
    if message.contact is not None:
        contact = message.contact
        name = " ".join(part for part in (contact.first_name, contact.last_name) if part)
        return f"[contact: {name}, {contact.phone_number}]"
    if message.poll is not None:
        options = " / ".join(option.text for option in message.poll.options)
        return f"[poll: {message.poll.question} — {options}]"
    if message.dice is not None:
        return f"[rolled {message.dice.emoji}: {message.dice.value}]"
    return ""


def _where(location: Location) -> str:
    return f"{location.latitude:.5f}, {location.longitude:.5f}"


def _sticker_mime(sticker: Sticker) -> str:
    if sticker.is_video:
        return "video/webm"
    return "application/x-tgsticker" if sticker.is_animated else "image/webp"


def _utf16_slice(text: str, start: int) -> str:
    """``text`` from UTF-16 offset ``start`` (entities count UTF-16 units, Python code points)."""
    return text.encode("utf-16-le")[2 * start :].decode("utf-16-le")
