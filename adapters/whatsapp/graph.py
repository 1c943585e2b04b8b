"""The Cloud API over HTTP (aiohttp): authenticated requests to the Graph API and its errors as
``DeliveryError``. Every request has a timeout; the token never reaches a log line or an error.

Meta sends no ``Retry-After``: its error codes say which limit was hit, and the wait is the limit's own
(the number's throughput, 80 messages a second: a second; one person, about one message every 6
seconds: 6 seconds; the app's hourly call limits: a minute, then again).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from adapters.base import DeliveryError

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=15)
UPLOAD_TIMEOUT = aiohttp.ClientTimeout(total=120)
OUTSIDE_WINDOW = 131047  # "Re-engagement message": more than 24 hours since the person last wrote
# code -> (seconds to wait, for the whole number rather than one person)
RATE_LIMITS: dict[int, tuple[float, bool]] = {
    130429: (1.0, True),  # the number's throughput
    131056: (6.0, False),  # pair rate: this business and this person
    4: (60.0, True),  # the app's call limit
    80007: (60.0, True),  # the WhatsApp Business Account's rate limit
    133016: (60.0, True),  # registration limit
}
RETRYABLE = frozenset({1, 2, 131000, 131016})  # unknown, temporary, "something went wrong", overloaded
GONE = frozenset({131026, 131030, 131021})  # undeliverable, not an allowed test number, the bot itself
AUTH = frozenset({0, 190, 10, 200})


class GraphError(DeliveryError):
    """A Graph API refusal, with Meta's error ``code``."""

    def __init__(self, message: str, code: int, **kinds: Any) -> None:
        super().__init__(message, **kinds)
        self.code = code


def graph_error(status: int, body: bytes, what: str) -> DeliveryError:
    """The ``DeliveryError`` for an answer with HTTP ``status`` (not 2xx) and Meta's error body."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    code: int = error["code"] if isinstance(error.get("code"), int) else -1
    details = (
        (error.get("error_data") or {}).get("details") if isinstance(error.get("error_data"), dict) else None
    )
    said = details or error.get("message") or "no detail"
    reason = f"WhatsApp refused {what} (HTTP {status}, error {code}: {said})"
    if code in RATE_LIMITS:
        wait, number_wide = RATE_LIMITS[code]
        return GraphError(reason, code, retryable=True, retry_after=wait, bot_wide=number_wide)
    if code in RETRYABLE or status >= 500 or status == 429:
        return GraphError(reason, code, retryable=True)
    if code in GONE:
        return GraphError(reason, code, permanent=True)
    if code in AUTH or status == 401:
        return GraphError(f"{reason}; check WHATSAPP_ACCESS_TOKEN", code)
    return GraphError(reason, code)


class Graph:
    """Requests of one business number (``phone_number_id``) with one token."""

    def __init__(self, session: aiohttp.ClientSession, base: str, version: str, phone_number_id: str,
                 token: str) -> None:  # fmt: skip
        self.session = session
        self.root = f"{base.rstrip('/')}/{version}"
        self.number = phone_number_id
        self._headers = {"Authorization": f"Bearer {token}"}

    async def number_info(self) -> dict[str, Any]:
        return await self._json("GET", f"{self.root}/{self.number}", what="the number's details")

    async def message(self, body: dict[str, Any], what: str) -> dict[str, Any]:
        """``POST /{phone-number-id}/messages`` (``messaging_product`` added)."""
        payload = {"messaging_product": "whatsapp", **body}
        return await self._json("POST", f"{self.root}/{self.number}/messages", json_body=payload, what=what)

    async def commands(self, commands: list[dict[str, str]]) -> None:
        """The commands WhatsApp suggests when a person types ``/`` (conversational components)."""
        body = {"commands": commands}
        await self._json("POST", f"{self.root}/{self.number}/conversational_automation", json_body=body,
                         what="the command list")  # fmt: skip

    async def upload(self, data: bytes, mime_type: str, name: str) -> str:
        """``POST /{phone-number-id}/media``: the media id a message can send."""
        form = aiohttp.FormData()
        form.add_field("messaging_product", "whatsapp")
        form.add_field("type", mime_type)
        form.add_field("file", data, filename=name, content_type=mime_type)
        url = f"{self.root}/{self.number}/media"
        answer = await self._json("POST", url, data=form, what=f"uploading {name}", limit=UPLOAD_TIMEOUT)
        return str(answer.get("id") or "")

    async def media_url(self, media_id: str) -> dict[str, Any]:
        """``GET /{media-id}``: its download ``url`` (valid for minutes), ``mime_type`` and ``file_size``."""
        return await self._json("GET", f"{self.root}/{media_id}", what="a media file's address")

    async def download(self, url: str, max_bytes: int) -> bytes:
        """The file at ``url`` (it needs the token too), reading nothing past ``max_bytes``."""
        try:
            async with self.session.get(url, headers=self._headers, timeout=UPLOAD_TIMEOUT) as response:
                if response.status >= 400:
                    raise graph_error(response.status, await response.read(), "a media download")
                data = await response.content.read(max_bytes + 1)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(
                f"downloading WhatsApp media failed: {type(exc).__name__}", retryable=True
            ) from exc
        if len(data) > max_bytes:
            raise DeliveryError(f"the file is over {max_bytes:,} bytes", permanent=True)
        return data

    async def _json(self, method: str, url: str, *, what: str, json_body: Any = None, data: Any = None,
                    limit: aiohttp.ClientTimeout = REQUEST_TIMEOUT) -> dict[str, Any]:  # fmt: skip
        try:
            async with self.session.request(
                method, url, json=json_body, data=data, headers=self._headers, timeout=limit
            ) as response:
                body = await response.read()
                if response.status >= 300:
                    raise graph_error(response.status, body, what)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"WhatsApp: {what} failed: {type(exc).__name__}", retryable=True) from exc
        try:
            answer = json.loads(body)
        except ValueError as exc:
            raise DeliveryError(f"WhatsApp answered {what} with something not JSON", retryable=True) from exc
        return answer if isinstance(answer, dict) else {}
