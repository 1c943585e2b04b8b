"""discord.py failures as typed :class:`DeliveryError`, and error text safe to log.

discord.py has already retried what it retries by the time an error reaches us: 429s that carry a
``Via`` header (up to five tries per request, sleeping Discord's ``retry_after``), and 500/502/504/524
(after 1 s, 3 s, ...). The table (checked in this order):

=========================================  ======================================================
discord.py error                           DeliveryError
=========================================  ======================================================
``RateLimited`` (wait > the client's       ``retryable``, ``retry_after`` = Discord's seconds
  ``max_ratelimit_timeout``)
``HTTPException`` 429 (five in a row, or   ``retryable``, ``retry_after`` from the headers;
  Cloudflare's, without ``Via``)              ``bot_wide`` when Discord says the limit is global
``DiscordServerError`` / any 5xx           ``retryable``
``Forbidden`` (50013 Missing Permissions,  ``permanent``
  50001 Missing Access, 50007 cannot DM)
``NotFound`` (10003 Unknown Channel,       ``permanent`` (an edit's target is gone: the gateway
  10008 Unknown Message)                     sends a new message instead)
other ``HTTPException`` (400: content      not retryable (the gateway splits at 2000 characters,
  over 2000, empty message; 401)             so a 400 is a bug, not a reason to retry)
``aiohttp.ClientError``, ``OSError``,      ``retryable``
  ``TimeoutError``
=========================================  ======================================================

Discord does not reject Markdown, so ``formatting`` is never set. A send that timed out or lost its
connection may still have been posted; whoever retries accepts that duplicate risk.
"""

from __future__ import annotations

import aiohttp
import discord

from adapters.base import DeliveryError
from adapters.redaction import describe

# discord.py raises these when a request was refused before or without an HTTP answer it parses.
NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


def delivery_error(exc: BaseException, operation: str, token: str) -> DeliveryError:
    """The typed form of a discord.py failure of ``operation`` ("send message", ...)."""
    text = f"Discord {operation} failed: {describe(exc, token).replace(chr(10), '; ')}"
    if isinstance(exc, discord.RateLimited):
        return DeliveryError(text, retryable=True, retry_after=exc.retry_after)
    if isinstance(exc, discord.HTTPException):
        if exc.status == 429:
            return DeliveryError(
                text, retryable=True, retry_after=retry_after_seconds(exc), bot_wide=is_global(exc)
            )
        if exc.status >= 500:
            return DeliveryError(text, retryable=True)
        if isinstance(exc, discord.Forbidden | discord.NotFound):
            return DeliveryError(text, permanent=True)
        return DeliveryError(text)
    if isinstance(exc, NETWORK_ERRORS):
        return DeliveryError(text, retryable=True)
    return DeliveryError(text)


def is_global(exc: discord.HTTPException) -> bool:
    """Whether a 429 was the bot's global limit (every channel waits), from Discord's headers."""
    headers = getattr(exc.response, "headers", None)
    if headers is None:
        return False
    scope = str(headers.get("X-RateLimit-Scope", "")).lower()
    return str(headers.get("X-RateLimit-Global", "")).lower() == "true" or scope == "global"


def retry_after_seconds(exc: discord.HTTPException) -> float | None:
    """Discord's wait for a 429, from the response headers (discord.py keeps no parsed body).

    ``X-RateLimit-Reset-After`` has fractions of a second; ``Retry-After`` is whole seconds.
    """
    headers = getattr(exc.response, "headers", None)
    if headers is None:
        return None
    for name in ("X-RateLimit-Reset-After", "Retry-After"):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return max(0.0, float(raw))
        except ValueError:
            continue
    return None
