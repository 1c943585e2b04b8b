"""slack_sdk failures as typed :class:`DeliveryError`.

slack_sdk retries nothing but dropped connections by default (429s included: it raises at once), so
every rate limit reaches the gateway's send pacing. The table (checked in this order):

=========================================  ======================================================
failure                                    DeliveryError
=========================================  ======================================================
HTTP 429 / ``ratelimited``                 ``retryable``, ``retry_after`` from ``Retry-After``;
                                             ``bot_wide`` unless the method is limited per channel
                                             (``chat.postMessage``: one a second per channel)
``channel_not_found``, ``is_archived``,    ``permanent`` (the chat is gone or closed to the bot)
  ``not_in_channel``, ``message_not_found``,
  ``cant_update_message``, ...
``invalid_blocks``, ``invalid_attachments``  ``formatting``
HTTP 5xx, ``fatal_error``,                 ``retryable``
  ``internal_error``, ``service_unavailable``
``invalid_auth``, ``not_authed``, other    not retryable
``aiohttp.ClientError``, ``TimeoutError``  ``retryable`` (a send may still have been posted)
=========================================  ======================================================
"""

from __future__ import annotations

import asyncio

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from adapters.base import DeliveryError

PER_CHANNEL_METHODS = frozenset({"chat.postMessage", "chat.postEphemeral"})
PERMANENT = frozenset(
    {
        "channel_not_found",
        "is_archived",
        "not_in_channel",
        "message_not_found",
        "cant_update_message",
        "cant_delete_message",
        "user_not_found",
        "account_inactive",
        "team_access_not_granted",
        "restricted_action",
        "file_not_found",
        "file_deleted",
    }
)
FORMATTING = frozenset({"invalid_blocks", "invalid_blocks_format", "invalid_attachments", "msg_too_long"})
TRANSIENT = frozenset({"fatal_error", "internal_error", "service_unavailable", "request_timeout"})
DEFAULT_RETRY_AFTER = 1.0  # seconds, when a 429 carries no Retry-After


def error_code(exc: SlackApiError) -> str:
    data = exc.response.data if exc.response is not None else None
    return str(data.get("error", "")) if isinstance(data, dict) else ""


def delivery_error(exc: BaseException, method: str) -> DeliveryError:
    """The typed form of a failure of the Web API ``method`` ("chat.postMessage", ...)."""
    if isinstance(exc, SlackApiError):
        code, status = error_code(exc), exc.response.status_code
        text = f"Slack {method} failed: {code or f'HTTP {status}'}"
        if status == 429 or code == "ratelimited":
            return DeliveryError(
                text,
                retryable=True,
                retry_after=retry_after(exc),
                bot_wide=method not in PER_CHANNEL_METHODS,
            )
        if code in PERMANENT:
            return DeliveryError(text, permanent=True)
        if code in FORMATTING:
            return DeliveryError(text, formatting=True)
        return DeliveryError(text, retryable=status >= 500 or code in TRANSIENT)
    if isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | SlackClientError | OSError):
        return DeliveryError(f"Slack {method} failed: {type(exc).__name__}: {exc}", retryable=True)
    return DeliveryError(f"Slack {method} failed: {type(exc).__name__}: {exc}")


def retry_after(exc: SlackApiError) -> float:
    headers = exc.response.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else DEFAULT_RETRY_AFTER
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER
