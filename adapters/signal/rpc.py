"""signal-cli's daemon over HTTP: JSON-RPC calls (``POST /api/v1/rpc``) and the event stream
(``GET /api/v1/events``, Server-Sent Events), both through one aiohttp session.

A JSON-RPC error becomes a :class:`DeliveryError` saying what signal-cli said: code -5 is its rate
limit (the wait is the largest ``retryAfterSeconds`` of the failed sends), -3 an I/O failure and the
JSON-RPC internal error worth retrying, -4 an untrusted safety number, -1 a refusal (an unknown group,
an unregistered person).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from adapters.base import DeliveryError

RATE_LIMITED, IO_ERROR, UNTRUSTED, USER_ERROR, INTERNAL = -5, -3, -4, -1, -32603
MAX_EVENT_BYTES = 4 * 1024 * 1024  # one event's data; an envelope is a few KiB (files are fetched apart)


class SignalRpc:
    """JSON-RPC 2.0 to the daemon at ``base`` (``http://127.0.0.1:8080``)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self._session = session
        self._url = f"{base}/api/v1/rpc"
        self._ids = itertools.count(1)

    async def call(self, method: str, params: dict[str, Any], *, timeout: float) -> Any:  # noqa: ASYNC109
        """The ``result`` of ``method``; :class:`DeliveryError` for an error, a timeout or no daemon."""
        request = {"jsonrpc": "2.0", "method": method, "params": params, "id": next(self._ids)}
        try:
            async with self._session.post(
                self._url, json=request, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                if response.status != 200:
                    raise DeliveryError(f"signal-cli answered {method} with HTTP {response.status}",
                                        retryable=response.status >= 500)  # fmt: skip
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise DeliveryError(f"signal-cli {method} failed: {type(exc).__name__}", retryable=True) from exc
        if not isinstance(answer, dict):
            raise DeliveryError(f"signal-cli answered {method} with no JSON-RPC object", retryable=True)
        error = answer.get("error")
        if isinstance(error, dict):
            raise rpc_error(method, error)
        return answer.get("result")


def rpc_error(method: str, error: dict[str, Any]) -> DeliveryError:
    code, message = error.get("code"), str(error.get("message") or "")
    said = f"signal-cli refused {method} ({code}: {message})"
    if code == RATE_LIMITED:
        return DeliveryError(said, retryable=True, retry_after=retry_after(error.get("data")))
    if code == UNTRUSTED:
        return DeliveryError(f"{said}: a safety number changed; check it and run signal-cli trust")
    if code in (IO_ERROR, INTERNAL):
        return DeliveryError(said, retryable=True)
    gone = "UNREGISTERED_FAILURE" in json.dumps(error.get("data")) or "not a member" in message.lower()
    return DeliveryError(said, permanent=gone)


def retry_after(data: object) -> float | None:
    """The longest ``retryAfterSeconds`` among the send results in an error's ``data``."""
    response = data.get("response") if isinstance(data, dict) else None
    results = response.get("results") if isinstance(response, dict) else None
    waits = [
        float(item["retryAfterSeconds"])
        for item in (results if isinstance(results, list) else ())
        if isinstance(item, dict) and isinstance(item.get("retryAfterSeconds"), int | float)
    ]
    return max(waits) if waits else None


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, str]]:
    """The ``(event, data)`` pairs of a Server-Sent Events body, as they arrive; keep-alive comments are
    read (they show the stream is alive) but not yielded. Raises ValueError for an event past
    ``MAX_EVENT_BYTES``."""
    buffer = b""
    name, data = "message", list[str]()
    async for chunk in response.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", "replace")
            if not line:
                if data:
                    yield name, "\n".join(data)
                name, data = "message", list[str]()
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)
        if len(buffer) + sum(map(len, data)) > MAX_EVENT_BYTES:
            raise ValueError(f"an event of signal-cli's stream is over {MAX_EVENT_BYTES} bytes")
