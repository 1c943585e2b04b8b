"""Neutral outbound values as python-telegram-bot arguments (pure; the calls live in the adapter)."""

from __future__ import annotations

from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    MessageEntity,
    ReplyParameters,
)

from adapters.base import Button, ChatAddress, TextEntity

NO_LINK_PREVIEW = LinkPreviewOptions(is_disabled=True)


def chat_id(address: ChatAddress) -> int | str:
    """Telegram chat ids are integers; ``@channelname`` stays a string, as the Bot API accepts it."""
    try:
        return int(address.chat_id)
    except ValueError:
        return address.chat_id


def thread_id(address: ChatAddress) -> int | None:
    """The forum topic a message belongs to (``message_thread_id``), if any."""
    return int(address.thread_id) if address.thread_id else None


def message_entities(entities: tuple[TextEntity, ...]) -> list[MessageEntity]:
    """Offsets and lengths are UTF-16 units on both sides, so they pass through unchanged."""
    return [
        MessageEntity(
            type=e.type,
            offset=e.offset,
            length=e.length,
            url=e.url,
            language=e.language,
            custom_emoji_id=e.custom_emoji_id,
        )
        for e in entities
    ]


def reply_parameters(reply_to: str | None) -> ReplyParameters | None:
    """Reply when the original still exists; send anyway when it was deleted meanwhile."""
    if reply_to is None:
        return None
    return ReplyParameters(message_id=int(reply_to), allow_sending_without_reply=True)


def inline_keyboard(buttons: tuple[Button, ...]) -> InlineKeyboardMarkup | None:
    """One button a row (a label such as "Approve for this session" needs the width); its callback
    data is the command it stands for (at most 64 bytes, Telegram's limit)."""
    if not buttons:
        return None
    for button in buttons:
        if len(button.command.encode()) > 64:
            raise ValueError(f"a button's command is longer than Telegram's 64 bytes: {button.command!r}")
    return InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.command)] for b in buttons])
