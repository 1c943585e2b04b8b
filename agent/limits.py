"""A global cap on model requests in flight, over every session of the process.

A gateway serving hundreds of chats must not open hundreds of model streams at once: the provider
rate-limits, memory grows with every open stream, and nobody's answer gets faster. Each provider
attempt (not the backoff sleep between attempts) holds one slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class RequestLimiter(ABC):
    """Bounds concurrent model requests.

    Contract: ``async with limiter.slot():`` waits until fewer than the cap are in flight, then counts
    the caller in until the block exits (normally, by exception or by cancellation). A waiter that is
    cancelled takes no slot. A Redis implementation can bound requests across processes the same way.
    """

    @abstractmethod
    def slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold one of the slots for the duration of one provider request."""

    @property
    @abstractmethod
    def in_flight(self) -> int:
        """Requests holding a slot now (for metrics)."""


class LocalRequestLimiter(RequestLimiter):
    """An ``asyncio.Semaphore`` of ``limit`` slots."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the request limit must be at least 1, got {limit}")
        self.limit = limit
        self._semaphore = asyncio.Semaphore(limit)
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._semaphore:
            self._in_flight += 1
            try:
                yield
            finally:
                self._in_flight -= 1
