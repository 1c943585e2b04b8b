"""Discord's wire format: snowflakes, timestamps, error bodies and exact JSON responses.

discord.py decodes a body as JSON only when ``Content-Type`` is exactly ``application/json``
(``http.json_or_text``); aiohttp adds ``; charset=utf-8`` to text responses, so every answer here
is built from bytes with the header set by hand. Errors use Discord's shape
``{"code": N, "message": ...}`` (plus ``errors`` for "Invalid Form Body"), which discord.py turns
into ``HTTPException.code``/``.text``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
import time
from typing import Any

from aiohttp import web

DISCORD_EPOCH_MS = 1_420_070_400_000
JSON = "application/json"

# Discord JSON error codes the fake uses.
UNKNOWN_CHANNEL = 10003
UNKNOWN_MESSAGE = 10008
UNKNOWN_USER = 10013
UNKNOWN_WEBHOOK = 10015
UNKNOWN_INTERACTION = 10062
UNKNOWN_APPLICATION_COMMAND = 10063
CANNOT_EDIT_OTHERS = 50005
EMPTY_MESSAGE = 50006
CANNOT_DM_USER = 50007
MISSING_ACCESS = 50001
MISSING_PERMISSIONS = 50013
INVALID_FORM_BODY = 50035
ALREADY_ACKNOWLEDGED = 40060

ERROR_MESSAGES = {
    0: "General error",
    UNKNOWN_CHANNEL: "Unknown Channel",
    UNKNOWN_MESSAGE: "Unknown Message",
    UNKNOWN_USER: "Unknown User",
    UNKNOWN_WEBHOOK: "Unknown Webhook",
    UNKNOWN_INTERACTION: "Unknown interaction",
    UNKNOWN_APPLICATION_COMMAND: "Unknown application command",
    CANNOT_EDIT_OTHERS: "Cannot edit a message authored by another user",
    EMPTY_MESSAGE: "Cannot send an empty message",
    CANNOT_DM_USER: "Cannot send messages to this user",
    MISSING_ACCESS: "Missing Access",
    MISSING_PERMISSIONS: "Missing Permissions",
    INVALID_FORM_BODY: "Invalid Form Body",
    ALREADY_ACKNOWLEDGED: "Interaction has already been acknowledged.",
}
# The JSON code a scripted fault of a given HTTP status carries by default.
DEFAULT_FAULT_CODES = {400: 0, 401: 0, 403: MISSING_PERMISSIONS, 404: 0, 500: 0, 502: 0, 503: 0, 504: 0}
STATUS_MESSAGES = {
    401: "401: Unauthorized",
    404: "404: Not Found",
    405: "405: Method Not Allowed",
    500: "500: Internal Server Error",
    502: "502: Bad Gateway",
    503: "503: Service Unavailable",
    504: "504: Gateway Timeout",
}


class ApiError(Exception):
    """A Discord REST failure: ``{"code": ..., "message": ...[, "errors": ...]}`` with ``status``."""

    def __init__(
        self,
        status: int,
        code: int,
        message: str | None = None,
        errors: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        generic = STATUS_MESSAGES.get(status) if code == 0 else None
        self.message = message or generic or ERROR_MESSAGES.get(code) or STATUS_MESSAGES.get(status, "Error")
        self.errors = errors
        super().__init__(f"{status} {self.message} (code {code})")

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            out["errors"] = self.errors
        return out


def not_found(code: int) -> ApiError:
    return ApiError(404, code)


def form_error(path: str, code: str, message: str) -> ApiError:
    """400 "Invalid Form Body" with one field error; ``path`` is dotted (``embeds.0.description``)."""
    errors: dict[str, Any] = {"_errors": [{"code": code, "message": message}]}
    for part in reversed(path.split(".")):
        errors = {part: errors}
    return ApiError(400, INVALID_FORM_BODY, errors=errors)


def too_long(path: str, limit: int) -> ApiError:
    return form_error(path, "BASE_TYPE_MAX_LENGTH", f"Must be {limit} or fewer in length.")


class Snowflakes:
    """Increasing snowflakes whose timestamp part is the current time (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0
        self._increment = itertools.count()

    def next(self) -> int:
        with self._lock:
            now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
            value = max(now | (next(self._increment) & 0xFFF), self._last + 1)
            self._last = value
            return value


def snowflake_time(snowflake: int) -> str:
    return iso((snowflake >> 22) / 1000 + DISCORD_EPOCH_MS / 1000)


def iso(timestamp: float | None = None) -> str:
    """ISO 8601 with microseconds and +00:00, as Discord writes timestamps."""
    moment = dt.datetime.fromtimestamp(time.time() if timestamp is None else timestamp, dt.UTC)
    return moment.isoformat(timespec="microseconds")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    """A response with ``Content-Type: application/json`` exactly.

    A ``None`` body is a 204 without content and without ``Content-Type``, as Discord sends it:
    discord.py would try to decode an empty body labelled JSON and fail.
    """
    if body is None:
        return web.Response(status=status, headers=headers or {})
    out_headers = {**(headers or {}), "Content-Type": JSON}
    return web.Response(status=status, body=dumps(body).encode(), headers=out_headers)


def rate_limit_headers(
    bucket: str, *, limit: int, remaining: int, reset_after: float, scope: str | None = None
) -> dict[str, str]:
    """The ``X-RateLimit-*`` headers discord.py reads (``http.Ratelimit.update``)."""
    headers = {
        "X-RateLimit-Bucket": bucket,
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(max(remaining, 0)),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
    }
    if scope is not None:
        headers["X-RateLimit-Scope"] = scope
    return headers
