"""Turning every failure of a model call into a ``ProviderError``: the one place failures are classified.

Both SDKs expose the same exception classes (status errors with a response, timeouts, connection
errors, errors raised mid-stream with a body), so one function classifies them; the caller passes its
SDK module so this module imports neither (each SDK takes about a second to import).

The SDKs do not wrap everything (measured with anthropic 2.12 / openai 3.54 over httpx2 against the
emulator's faults): a connection cut mid-stream leaks out of the anthropic stream iterator as a bare
``httpx2.RemoteProtocolError`` (openai wraps it in ``APIConnectionError``), and a body or SSE line
with truncated JSON leaks from both as a bare ``json.JSONDecodeError``, streaming or not. So the
transport's and the parser's own exceptions are classified here too, and whatever is left is a bug:
a non-retryable ``internal`` error, logged once with its traceback.

Kinds: ``timeout``, ``unreachable`` (no connection could be made), ``connection`` (it dropped, or the
stream ended without its terminal event), ``malformed`` (unparseable response), ``internal``, and for
status errors the provider's error type (``overloaded_error`` ...) or ``status``.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from agent.model.provider import ProviderError

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
RETRYABLE_BODY_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "server_error", "timeout_error"}

# Exceptions below the SDKs, most specific first, as (module, class name, kind). They are looked up
# in ``sys.modules`` instead of imported: an exception of a module that is not loaded cannot exist,
# and older SDK releases run on ``httpx`` where newer ones run on ``httpx2``.
_LOW_LEVEL: tuple[tuple[str, str, str], ...] = (
    *(
        entry
        for http in ("httpx2", "httpx")
        for entry in (
            (http, "TimeoutException", "timeout"),
            (http, "ConnectError", "unreachable"),
            (http, "DecodingError", "malformed"),
            (http, "TransportError", "connection"),
        )
    ),
    ("builtins", "TimeoutError", "timeout"),  # asyncio.TimeoutError too
    ("builtins", "ConnectionRefusedError", "unreachable"),
    ("builtins", "ConnectionError", "connection"),
    ("ssl", "SSLError", "connection"),
    ("anyio", "EndOfStream", "connection"),
    ("anyio", "BrokenResourceError", "connection"),
    ("json", "JSONDecodeError", "malformed"),
    ("builtins", "UnicodeDecodeError", "malformed"),
    ("pydantic_core", "ValidationError", "malformed"),
)

_MESSAGES = {
    "timeout": "request timed out",
    "unreachable": "could not connect",
    "connection": "the connection dropped",
    "malformed": "malformed response",
}


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


def error_message(body: object, fallback: str) -> str:
    """The message of a provider's error body (both APIs: ``{"error": {"message"}}``), else ``fallback``."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return fallback


def low_level_kind(exc: BaseException) -> str | None:
    """The kind of a transport or parsing exception (see ``_LOW_LEVEL``); ``None`` for anything else."""
    for module_name, class_name, kind in _LOW_LEVEL:
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type) and isinstance(exc, cls):
            return kind
    return None


def _low_level_error(kind: str, exc: BaseException) -> ProviderError:
    detail = str(exc) or type(exc).__name__
    return ProviderError(f"{_MESSAGES[kind]}: {detail}", retryable=True, kind=kind)


def from_sdk_exception(exc: Exception, sdk: ModuleType) -> ProviderError:
    """Classify any exception raised while calling ``sdk`` (the anthropic or openai module).

    Never raises: an exception nothing here recognizes becomes a non-retryable ``internal`` error.
    """
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderError("request timed out", retryable=True, kind="timeout")
    if isinstance(exc, sdk.APIConnectionError):  # the SDK's wrapper: its cause says what happened
        cause = exc.__cause__
        kind = (low_level_kind(cause) if cause is not None else None) or "connection"
        return _low_level_error(kind, cause or exc)
    if isinstance(exc, sdk.APIResponseValidationError):
        return ProviderError(f"malformed response: {exc}", retryable=True, kind="malformed")
    if isinstance(exc, sdk.APIStatusError):
        body_type = _body_error_type(exc.body)
        status = exc.status_code
        if status == 200 and body_type is not None:  # an error event in the middle of a stream
            status = 529 if body_type == "overloaded_error" else (429 if "rate_limit" in body_type else 500)
        retryable = status in RETRYABLE_STATUS or body_type in RETRYABLE_BODY_TYPES
        return ProviderError(
            error_message(exc.body, str(exc)),
            retryable=retryable,
            status=status,
            retry_after=parse_retry_after(exc.response.headers),
            kind=body_type or "status",
        )
    if isinstance(exc, sdk.APIError):
        body_type = _body_error_type(exc.body)
        return ProviderError(
            error_message(exc.body, str(exc)),
            retryable=body_type in RETRYABLE_BODY_TYPES or body_type is None,
            status=529 if body_type == "overloaded_error" else None,
            kind=body_type or "stream",
        )
    low_level = low_level_kind(exc)
    if low_level is not None:
        return _low_level_error(low_level, exc)
    return ProviderError(f"unexpected {type(exc).__name__}: {exc}", retryable=False, kind="internal")


def incomplete_stream(missing: str) -> ProviderError:
    """A stream that ended cleanly but without ``missing``: the connection was cut, the answer is partial.

    An HTTP/1.0-style hop or a crashed compatible server ends the body with the connection, so the
    SDK sees a normal end of stream; returning what arrived would store a truncated answer as final.
    """
    return ProviderError(f"the stream ended without {missing}", retryable=True, kind="connection")


def missing_v1_hint(base_url: str) -> str | None:
    """A hint when an OpenAI-compatible endpoint answered 404 and its URL has no version in its path.

    ``OPENAI_BASE_URL=http://localhost:8000`` is a common slip: compatible servers serve the API under
    ``/v1``, so every request is a 404 that says nothing about why.
    """
    url = base_url.rstrip("/")
    path = urlsplit(url).path
    if re.search(r"/v\d", path):
        return None
    return (
        f"the endpoint {url} has no /v1 in its path; OpenAI-compatible servers usually serve the API "
        f"under /v1, so try OPENAI_BASE_URL={url}/v1 (or model.base_url)"
    )


def redact(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` with every secret (an API key) replaced by a mask."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[REDACTED]")
    return text


@contextmanager
def provider_failures(sdk: ModuleType, provider: str, secrets: Sequence[str | None] = ()) -> Iterator[None]:
    """Wrap one model call so that only ``ProviderError`` (or cancellation) leaves it.

    ``secrets`` (the provider's API key) are masked in the error's message and in the log. An
    ``internal`` error (a bug) is logged here with its traceback, once; it is not retried.
    """
    try:
        yield
    except ProviderError:
        raise
    except Exception as exc:
        error = from_sdk_exception(exc, sdk)
        error.args = (redact(str(error), secrets),)
        if error.kind == "internal":
            trace = "".join(traceback.format_exception(exc)).rstrip()
            log.error("provider %s: unexpected failure of a model call\n%s", provider, redact(trace, secrets))
        raise error from exc
