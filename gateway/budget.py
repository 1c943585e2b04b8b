"""One send budget per gateway: when a platform says "slow down", every sender of that chat listens.

Streaming edits, final answers, command replies and cron deliveries all reach a chat through this
budget. A 429 with ``retry_after`` pauses the chat for everyone, so a burst of replies never turns
into a flood ban. Platform SDKs keep their own pacing too (python-telegram-bot's ``AIORateLimiter``,
discord.py's buckets): this is the shared layer above them. Pauses that ended are swept once more
than ``PRUNE_AT`` chats were paused, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from adapters.base import ChatAddress

ChatKey = tuple[str, str]  # (platform, chat id)
PRUNE_AT = 1024  # entries kept before the expired ones are swept


class SendBudget:
    """Per-chat "not before" times. ``wait`` may be called by many tasks at once."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._not_before: dict[ChatKey, float] = {}

    async def wait(self, address: ChatAddress) -> None:
        """Return when ``address``'s chat may receive the next operation."""
        key = (address.platform, address.chat_id)
        while True:
            now = self._clock()
            ready_at = self._not_before.get(key, 0.0)
            if ready_at <= now:
                return
            await asyncio.sleep(ready_at - now)

    def penalize(self, address: ChatAddress, retry_after: float) -> None:
        """The platform answered 429: nobody sends to this chat for ``retry_after`` seconds."""
        key = (address.platform, address.chat_id)
        now = self._clock()
        self._not_before[key] = max(self._not_before.get(key, 0.0), now + max(0.0, retry_after))
        self._prune(now)

    def paused_for(self, address: ChatAddress) -> float:
        """Seconds until ``address``'s chat may be sent to (0 when it may now)."""
        return max(0.0, self._not_before.get((address.platform, address.chat_id), 0.0) - self._clock())

    def _prune(self, now: float) -> None:
        if len(self._not_before) > PRUNE_AT:
            self._not_before = {k: v for k, v in self._not_before.items() if v > now}
