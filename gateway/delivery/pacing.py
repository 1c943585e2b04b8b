"""The send pacing: when a platform says "slow down", every sender of that chat listens.

Streaming edits, final answers, command replies and cron deliveries all reach a chat through one
pacing. A 429 with ``retry_after`` pauses the chat (or, when the platform says the limit was the
bot's, every chat of the platform) for everyone, so a burst of replies never turns into a flood ban.

Two implementations of :class:`SendPacing`:

- :class:`LocalSendPacing` (one process, the default): remembers 429 pauses in memory. The pacing
  itself is the platform SDK's (python-telegram-bot's ``AIORateLimiter``, discord.py's buckets).
- ``gateway.cluster.counting.pacing.RedisSendPacing`` (``cluster.redis_url``): the pauses and the
platforms'
  published rates (``Adapter.send_rates``) are counted in Redis, so several processes together stay
  under the limits one bot has.

Contract for callers (``gateway.delivery.sender``, ``gateway.delivery.stream``):

- :meth:`~SendPacing.wait` returns when one operation to the chat may go out now, and counts it: call
  it right before each send, edit or delete, once. Many tasks may wait at once.
- :meth:`~SendPacing.paused_for` says how long :meth:`~SendPacing.wait` would take at least; a caller
  that must not block (the outbox sender) postpones the operation instead when it is long.
- :meth:`~SendPacing.penalize` never raises.
- :meth:`~SendPacing.wait` and :meth:`~SendPacing.paused_for` raise :class:`PacingUnavailable` when
  the pacing cannot be consulted (the cluster's Redis is down): nothing may be sent then, try later.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from adapters.base import ChatAddress

PauseKey = tuple[str, str | None]  # (platform, chat id); chat None: every chat of the platform
PRUNE_AT = 1024  # entries kept before the expired ones are swept


class PacingUnavailable(Exception):
    """The pacing cannot say whether a send may go out (its Redis cannot be reached): send nothing now."""


class SendPacing(ABC):
    """When operations to a chat may go out."""

    @abstractmethod
    async def wait(self, address: ChatAddress) -> None:
        """Return when ``address``'s chat may receive the next operation (counted as sent)."""

    @abstractmethod
    async def penalize(self, address: ChatAddress, retry_after: float, *, bot_wide: bool = False) -> None:
        """The platform answered 429: nobody sends to this chat (``bot_wide``: to any chat of the
        platform) for ``retry_after`` seconds."""

    @abstractmethod
    async def paused_for(self, address: ChatAddress) -> float:
        """Seconds until ``address``'s chat may be sent to (0 when it may now)."""


class LocalSendPacing(SendPacing):
    """Per-chat "not before" times in this process. Pauses that ended are swept once more than
    ``PRUNE_AT`` chats were paused, so memory stays bounded."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._not_before: dict[PauseKey, float] = {}

    async def wait(self, address: ChatAddress) -> None:
        while True:
            pause = self.pause(address)
            if pause <= 0:
                return
            await asyncio.sleep(pause)

    async def penalize(self, address: ChatAddress, retry_after: float, *, bot_wide: bool = False) -> None:
        self.remember(address, retry_after, bot_wide=bot_wide)

    async def paused_for(self, address: ChatAddress) -> float:
        return self.pause(address)

    def remember(self, address: ChatAddress, retry_after: float, *, bot_wide: bool = False) -> None:
        """:meth:`penalize` without awaiting (for a pacing that keeps this one as its local copy)."""
        key = (address.platform, None if bot_wide else address.chat_id)
        now = self._clock()
        self._not_before[key] = max(self._not_before.get(key, 0.0), now + max(0.0, retry_after))
        self._prune(now)

    def pause(self, address: ChatAddress) -> float:
        """:meth:`paused_for` without awaiting."""
        ready_at = max(
            self._not_before.get((address.platform, address.chat_id), 0.0),
            self._not_before.get((address.platform, None), 0.0),
        )
        return max(0.0, ready_at - self._clock())

    def _prune(self, now: float) -> None:
        if len(self._not_before) > PRUNE_AT:
            self._not_before = {k: v for k, v in self._not_before.items() if v > now}
