"""PTB's ``AIORateLimiter`` with two fixes for a gateway: bounded flood waits, typing off-budget.

``AIORateLimiter`` paces sends as Telegram requires (about 30/s overall, 20/min per group) and
retries a 429 after Telegram's ``retry_after``, holding *every* request of the bot meanwhile. Two
things it does not know about us:

- A long flood wait (minutes) must not be slept through inside one ``send``: it would freeze all
  chats and hide the reason. Above ``max_wait`` the ``RetryAfter`` goes straight to the caller
  (as ``DeliveryError(retryable, retry_after)``), whose outbox schedules the retry.
- ``sendChatAction`` ("typing…") is best effort and worthless when late: it skips the pacing so it
  never spends the budget a real reply needs, and is never retried.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from telegram.error import RetryAfter
from telegram.ext import AIORateLimiter

from .errors import retry_after_seconds

Result = bool | dict[str, Any] | list[dict[str, Any]]  # what a Bot API call answers
UNPACED_ENDPOINTS = frozenset({"sendChatAction"})


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
