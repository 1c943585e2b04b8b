"""Offline Telegram Bot API server for one bot, as python-telegram-bot sees Telegram.

It keeps the semantics our gateway depends on: offsets confirm updates, long polls wake on a new
update, webhooks get the secret header and keep failed updates pending, and sends are validated
like Telegram does (4096 UTF-16 units, entity offsets, HTML tags, "message is not modified").
See shared/notes/platforms.md for the facts behind it.
"""

from ..waiting import WaitTimeout
from .records import ChatAction, RecordedCall, SentMessage, WebhookDelivery
from .server import FakeTelegram
from .state import DEFAULT_TOKEN

__all__ = [
    "DEFAULT_TOKEN",
    "ChatAction",
    "FakeTelegram",
    "RecordedCall",
    "SentMessage",
    "WaitTimeout",
    "WebhookDelivery",
]
