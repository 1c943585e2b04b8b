"""Turning SDK exceptions (anthropic and openai alike) into ``ProviderError``.

Both SDKs expose the same exception classes (status errors with a response, timeouts, connection
errors, errors raised mid-stream with a body), so one function classifies them; the caller passes its
SDK module so this module imports neither (each SDK takes about a second to import).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from agent.providers.base import ProviderError

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_BODY_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "server_error", "timeout_error"}


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds); ``None`` when absent or a date."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return float(raw_ms) / 1000
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _body_error_type(body: object) -> str | None:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code")
            return str(kind) if kind is not None else None
    return None


def _body_message(body: object, fallback: str) -> str:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return fallback


def from_sdk_exception(exc: Exception, sdk: ModuleType) -> ProviderError:
    """Classify an exception raised by ``sdk`` (the anthropic or openai module) during a request."""
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError("request timed out", retryable=True, kind="timeout")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError(f"connection failed: {exc}", retryable=True, kind="connection")
    if isinstance(exc, sdk.APIStatusError):
        body_type = _body_error_type(exc.body)
        status = exc.status_code
        if status == 200 and body_type is not None:  # an error event in the middle of a stream
            status = 529 if body_type == "overloaded_error" else (429 if "rate_limit" in body_type else 500)
        retryable = status in RETRYABLE_STATUS or body_type in RETRYABLE_BODY_TYPES
        return ProviderError(
            _body_message(exc.body, str(exc)),
            retryable=retryable,
            status=status,
            retry_after=parse_retry_after(exc.response.headers),
            kind=body_type or "status",
        )
    if isinstance(exc, sdk.APIError):
        body_type = _body_error_type(exc.body)
        return ProviderError(
            _body_message(exc.body, str(exc)),
            retryable=body_type in RETRYABLE_BODY_TYPES or body_type is None,
            status=529 if body_type == "overloaded_error" else None,
            kind=body_type or "stream",
        )
    raise exc
