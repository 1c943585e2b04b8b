"""Webhook mode: the secret Telegram echoes back, and turning a POST body into an ``Update``.

The gateway's HTTP server owns the route; the adapter only judges a request (see
``TelegramAdapter.handle_webhook``). The secret is derived from the token, so every process and
every restart agrees on it without storing anything, and it changes when the token is revoked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from telegram import Bot, Update

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_SECRET_CONTEXT = b"herald-webhook"


def webhook_secret(token: str) -> str:
    """HMAC-SHA256(token, "herald-webhook") in hex: 64 chars of Telegram's allowed [A-Za-z0-9_-]."""
    return hmac.new(token.encode(), _SECRET_CONTEXT, hashlib.sha256).hexdigest()


def secret_matches(expected: str, given: str | None) -> bool:
    """Constant-time comparison, so the secret cannot be guessed byte by byte from timings."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def parse_update(body: bytes | dict[str, Any], bot: Bot) -> Update:
    """The ``Update`` in a webhook body; ``ValueError`` when it is not one."""
    data: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"webhook body is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
        raise ValueError("webhook body is not a Telegram update")
    try:
        return Update.de_json(data, bot)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"webhook body is not a valid update: {exc!r}") from exc
