"""mautrix's HTTP client, told to keep what a 429 says (``retry_after_ms``), and its errors as
``DeliveryError``.

mautrix turns an error answer into a typed exception but drops the body's ``retry_after_ms`` and the
``Retry-After`` header: :class:`HeraldHTTPAPI` overrides the one method that reads answers
(``HTTPAPI._send``) to raise :class:`RateLimited` with the wait the homeserver asked for. mautrix
never retries a 429 itself (``default_retry_count`` 0): the wait goes to the gateway's send pacing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import ClientError, ClientResponse
from mautrix.api import HTTPAPI, Method
from mautrix.errors import (
    MatrixConnectionError,
    MatrixRequestError,
    MForbidden,
    MNotFound,
    make_request_error,
)
from mautrix.errors.request import MLimitExceeded, MUnknownToken
from yarl import URL

from adapters.base import DeliveryError


class RateLimited(MLimitExceeded):
    """A 429 (``M_LIMIT_EXCEEDED``) with the seconds the homeserver asked to wait (None: not said)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(429, message)
        self.retry_after = retry_after


def retry_after(body: Any, headers: Mapping[str, str]) -> float | None:
    """The wait a 429 asks for: ``retry_after_ms`` in its body, else the ``Retry-After`` header."""
    if isinstance(body, dict) and isinstance(body.get("retry_after_ms"), int | float):
        return max(0.0, float(body["retry_after_ms"]) / 1000)
    try:
        return max(0.0, float(headers.get("Retry-After", "")))
    except ValueError:
        return None


class HeraldHTTPAPI(HTTPAPI):
    """mautrix's ``HTTPAPI``, raising :class:`RateLimited` for a 429 (see the module docstring)."""

    async def _send(
        self, method: Method, url: URL, content: Any, query_params: dict[str, str], headers: dict[str, str]
    ) -> tuple[Any, ClientResponse]:
        request = self.session.request(str(method), url, data=content, params=query_params, headers=headers)
        async with request as response:
            if 200 <= response.status < 300:
                return await response.json(), response
            text = await response.text()
            try:
                body = json.loads(text)
            except ValueError:
                body = None
            fields = body if isinstance(body, dict) else {}
            if response.status == 429 or fields.get("errcode") == "M_LIMIT_EXCEEDED":
                raise RateLimited(
                    str(fields.get("error", "rate limited")), retry_after(fields, response.headers)
                )
            raise make_request_error(
                http_status=response.status,
                text=text,
                errcode=fields.get("errcode"),
                message=fields.get("error"),
                unstable_errcode=fields.get("org.matrix.msc3848.unstable.errcode"),
            )


NETWORK_ERRORS = (ClientError, MatrixConnectionError, asyncio.TimeoutError, OSError)


def delivery_error(what: str, error: BaseException) -> DeliveryError:
    """``error`` of an outbound call as the contract's :class:`DeliveryError`."""
    if isinstance(error, RateLimited):
        return DeliveryError(f"{what}: rate limited", retryable=True, retry_after=error.retry_after)
    if isinstance(error, MUnknownToken):
        return DeliveryError(f"{what}: the homeserver refused the access token", permanent=True)
    if isinstance(error, MForbidden | MNotFound):
        return DeliveryError(f"{what}: {error}", permanent=True)
    if isinstance(error, MatrixRequestError):
        status = getattr(error, "http_status", 0)
        return DeliveryError(f"{what}: HTTP {status} {error}", retryable=status >= 500 or status == 0)
    if isinstance(error, NETWORK_ERRORS):
        return DeliveryError(f"{what}: {type(error).__name__} {error}".rstrip(), retryable=True)
    return DeliveryError(f"{what}: {type(error).__name__}: {error}", retryable=True)
