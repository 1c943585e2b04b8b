"""Neutral outbound values as discord.py arguments (pure; the calls live in the adapter).

Mentions: Discord pings whatever ``<@id>``, ``<@&role>``, ``@everyone`` or ``@here`` a message
contains unless the request says otherwise, and discord.py sends no ``allowed_mentions`` unless
asked. Model output must never ping anyone, so every send and edit carries
:data:`NO_MENTIONS` (``{"parse": []}``); the one exception is an explicit reply to the person who
asked, which may notify that person and nobody else (:data:`REPLY_MENTIONS`).

Formatting: Discord renders Markdown itself, so the text passes through; ``OutboundText.entities``
(Telegram's vocabulary) are ignored here.
"""

from __future__ import annotations

import discord

from adapters.base import Button, ChatAddress, DeliveryError

NO_MENTIONS = discord.AllowedMentions.none()
REPLY_MENTIONS = discord.AllowedMentions(everyone=False, users=False, roles=False, replied_user=True)


def channel_id(address: ChatAddress) -> int:
    """Where a message to ``address`` goes: its thread if it names one, else its chat (a channel,
    a DM channel or a thread: on Discord all are channels)."""
    target = address.thread_id or address.chat_id
    try:
        return int(target)
    except ValueError:
        raise DeliveryError(f"{target!r} is not a Discord channel id", permanent=True) from None


def message_id(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DeliveryError(f"{value!r} is not a Discord message id", permanent=True) from None


def reply_reference(reply_to: str | None, channel: int) -> discord.MessageReference | None:
    """A reply when the original still exists; an ordinary message when it was deleted meanwhile
    (``fail_if_not_exists=False``), rather than a refused send."""
    if reply_to is None:
        return None
    return discord.MessageReference(
        message_id=message_id(reply_to), channel_id=channel, fail_if_not_exists=False
    )


def button_view(buttons: tuple[Button, ...]) -> discord.ui.View:
    """A row of buttons whose ``custom_id`` is the command each stands for (at most 100 characters);
    none: an empty view, which removes the buttons of an edited message. The view is finished before
    it is sent, so discord.py does not keep it: a press reaches the adapter as an interaction."""
    view = discord.ui.View(timeout=None)
    for number, button in enumerate(buttons):
        if len(button.command) > 100:
            raise DeliveryError(f"a button's command is over Discord's 100 characters: {button.command!r}")
        style = discord.ButtonStyle.danger if number == len(buttons) - 1 else discord.ButtonStyle.primary
        view.add_item(discord.ui.Button(label=button.label, custom_id=button.command, style=style))
    view.stop()
    return view
