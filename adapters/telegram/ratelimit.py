"""PTB's ``AIORateLimiter`` with two fixes for a gateway: bounded flood waits, typing off-budget.

``AIORateLimiter`` paces sends as Telegram requires (about 30/s overall, 20/min per group) and
retries a 429 after Telegram's ``retry_after``, holding *every* request of the bot meanwhile. Two
things it does not know about us:

- A long flood wait (minutes) must not be slept through inside one ``send``: it would freeze all
  chats and hide the reason. Above ``max_wait`` the ``RetryAfter`` goes straight to the caller
  (as ``DeliveryError(retryable, retry_after)``), whose outbox schedules the retry.
- ``sendChatAction`` ("typing…") is best effort and worthless when late: it skips the pacing so it
  never spends the budget a real reply needs, and is never retried.

This limiter paces one process. With several gateway processes (``cluster.redis_url``) each has its
own, so together they could send three times too fast; the cluster's shared send pacing
(``gateway.cluster.counting.pacing``) counts :data:`TELEGRAM_RATES` in Redis before a request reaches this
limiter, so what arrives here is already within the bot's limits and this layer rarely waits. A 429
this limiter retries itself (up to ``max_wait``) stays in this process; one it gives up on reaches the
outbox sender, which pauses the chat for every process.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from telegram.error import RetryAfter
from telegram.ext import AIORateLimiter

from adapters.base import SendRate

from .errors import retry_after_seconds

Result = bool | dict[str, Any] | list[dict[str, Any]]  # what a Bot API call answers
UNPACED_ENDPOINTS = frozenset({"sendChatAction"})

# Telegram's published limits (Bots FAQ): about 30 messages a second per bot, no more than one a second
# in one chat, 20 a minute in a group (a negative chat id: groups, supergroups, channels).
BOT_RATE = SendRate("bot", 30, 1)
CHAT_RATE = SendRate("chat", 1, 1)
GROUP_RATE = SendRate("chat", 20, 60)


def telegram_rates(chat_id: str) -> tuple[SendRate, ...]:
    """The limits a message to ``chat_id`` counts against."""
    if chat_id.startswith("-"):
        return (BOT_RATE, CHAT_RATE, GROUP_RATE)
    return (BOT_RATE, CHAT_RATE)


class _TooLongToWait(Exception):
    """Carries a ``RetryAfter`` past ``AIORateLimiter``'s retry loop, which only catches RetryAfter."""

    def __init__(self, original: RetryAfter) -> None:
        super().__init__(str(original))
        self.original = original


class BoundedRateLimiter(AIORateLimiter):
    """``AIORateLimiter(max_retries=...)`` that retries only waits up to ``max_wait`` seconds."""

    def __init__(self, *, max_retries: int, max_wait: float) -> None:
        super().__init__(max_retries=max_retries)
        self.max_wait = max_wait

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Result]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Result:
        if endpoint in UNPACED_ENDPOINTS:
            return await callback(*args, **kwargs)

        async def bounded(*call_args: Any, **call_kwargs: Any) -> Result:
            try:
                return await callback(*call_args, **call_kwargs)
            except RetryAfter as exc:
                if retry_after_seconds(exc) > self.max_wait:
                    raise _TooLongToWait(exc) from exc
                raise

        try:
            return await super().process_request(bounded, args, kwargs, endpoint, data, rate_limit_args)
        except _TooLongToWait as exc:
            raise exc.original from None
