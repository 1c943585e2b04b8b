"""python-telegram-bot errors as typed :class:`DeliveryError`, and error text safe to log.

The table (checked in this order, because PTB's ``BadRequest`` and ``TimedOut`` are both
``NetworkError`` subclasses):

=====================================  ==========================================================
PTB error                              DeliveryError
=====================================  ==========================================================
``RetryAfter`` (limiter gave up)       ``retryable``, ``retry_after`` = Telegram's seconds
``Forbidden`` (blocked, kicked)        ``permanent``
``ChatMigrated`` (group → supergroup)  ``permanent`` (the message names the new chat id)
``BadRequest`` "can't parse entities"  ``formatting`` (resend as plain text)
  or any other "entity" complaint
``BadRequest`` chat / message to edit  ``permanent``
  / topic not found, no rights
other ``BadRequest``                   not retryable
``InvalidToken``, ``Conflict``         not retryable (configuration, not this message)
``TimedOut``, other ``NetworkError``   ``retryable`` (5xx answers and dropped connections)
=====================================  ==========================================================

A ``TimedOut`` send may still have reached the chat; whoever retries it accepts that duplicate risk.
"""

from __future__ import annotations

import datetime as dtm
import warnings

from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.warnings import PTBDeprecationWarning

from adapters.base import DeliveryError

from .redaction import describe

# Lower-cased fragments of Telegram's descriptions (PTB capitalises the first letter).
_FORMATTING = ("can't parse entities", "entity", "entities")
_PERMANENT = (
    "chat not found",
    "message to edit not found",
    "message thread not found",
    "topic_deleted",
    "peer_id_invalid",
    "user is deactivated",
    "bot was kicked",
    "have no rights to send",
    "not enough rights to send",
)
NOT_MODIFIED = "message is not modified"
DELETE_NOT_FOUND = "message to delete not found"


def retry_after_seconds(exc: RetryAfter) -> float:
    """Telegram's wait in seconds, with or without ``PTB_TIMEDELTA``.

    PTB 22.2+ returns an int and warns unless ``PTB_TIMEDELTA`` is set, then a timedelta; reading the
    private ``_retry_after`` would break on the next release, so read the public attribute quietly.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)


def delivery_error(exc: TelegramError, operation: str, token: str) -> DeliveryError:
    """The typed form of a PTB failure of ``operation`` ("sendMessage", ...)."""
    text = f"Telegram {operation} failed: {describe(exc, token)}"
    detail = exc.message.lower()
    if isinstance(exc, RetryAfter):
        return DeliveryError(text, retryable=True, retry_after=retry_after_seconds(exc))
    if isinstance(exc, Forbidden | ChatMigrated):
        return DeliveryError(text, permanent=True)
    if isinstance(exc, BadRequest):
        if any(fragment in detail for fragment in _FORMATTING):
            return DeliveryError(text, formatting=True)
        return DeliveryError(text, permanent=any(fragment in detail for fragment in _PERMANENT))
    if isinstance(exc, InvalidToken | Conflict):
        return DeliveryError(text)
    if isinstance(exc, NetworkError):  # TimedOut included
        return DeliveryError(text, retryable=True)
    return DeliveryError(text)


def is_bad_request(exc: TelegramError, fragment: str) -> bool:
    return isinstance(exc, BadRequest) and fragment in exc.message.lower()
