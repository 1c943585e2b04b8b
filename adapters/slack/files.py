"""Files people share, fetched with the bot token.

Slack answers a file URL fetched without the token (or with a token lacking ``files:read``) with 200
and its HTML sign-in page: a response that is HTML where the file is not is refused, never handed to
the model as the file.
"""

from __future__ import annotations

import aiohttp

from adapters.base import Attachment, DeliveryError

DOWNLOAD_TIMEOUT = aiohttp.ClientTimeout(total=120, connect=10)
CHUNK = 64 * 1024


async def download(
    session: aiohttp.ClientSession, token: str, attachment: Attachment, max_bytes: int
) -> bytes:
    """The file's bytes (at most ``max_bytes``). Raises :class:`DeliveryError`."""
    if not attachment.file_id.startswith(("http://", "https://")):
        raise DeliveryError(
            "the Slack file has no download URL (it was deleted or is external)", permanent=True
        )
    if attachment.size is not None and attachment.size > max_bytes:
        raise DeliveryError(
            f"the file is {attachment.size:,} bytes, over the {max_bytes:,}-byte limit", permanent=True
        )
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with session.get(attachment.file_id, headers=headers, timeout=DOWNLOAD_TIMEOUT) as response:
            if response.status in (401, 403, 404, 410):
                raise DeliveryError(f"Slack refused the file (HTTP {response.status})", permanent=True)
            if response.status >= 400:
                raise DeliveryError(f"Slack could not send the file (HTTP {response.status})", retryable=True)
            if _sign_in_page(response.content_type, attachment.mime_type):
                raise DeliveryError(
                    "Slack answered with a sign-in page instead of the file: give the app the files:read "
                    "scope and reinstall it",
                    permanent=True,
                )
            data = bytearray()
            async for chunk in response.content.iter_chunked(CHUNK):
                data.extend(chunk)
                if len(data) > max_bytes:
                    raise DeliveryError(f"the file is over the {max_bytes:,}-byte limit", permanent=True)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DeliveryError(
            f"downloading the Slack file failed: {type(exc).__name__}", retryable=True
        ) from exc
    return bytes(data)


def _sign_in_page(content_type: str, expected: str | None) -> bool:
    return content_type == "text/html" and expected != "text/html"
