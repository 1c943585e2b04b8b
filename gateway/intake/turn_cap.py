"""The one cap on agent turns running at once: a chat's, an API request's and a cron run's alike.

A turn holds one slot of this process's cap (``gateway.max_concurrent_turns``) and, in a cluster, one of
the cluster-wide cap (``cluster.max_concurrent_turns``, a ``gateway.cluster.counting.semaphore``). The
chat's lanes (or the cluster's work queue) take the slot around a chat's work; the turn's envelope
(``gateway.conversation.envelope``) takes it for the API and cron. Taking it is re-entrant within the
work that holds it (a context variable the work's tasks inherit), so a chat turn never waits for a
second slot of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from typing import Literal, Protocol


class SharedSlots(Protocol):
    """The cluster-wide part of the cap (``gateway.cluster.counting.semaphore.RedisSemaphore``)."""

    def slot(self, *, unreachable: Literal["wait", "skip"] = "wait") -> AbstractAsyncContextManager[None]: ...


_HELD: ContextVar[TurnCap | None] = ContextVar("turn_slot_held", default=None)


class TurnCap:
    """``limit`` turns at once in this process, and ``shared``'s over the cluster (None: no such cap)."""

    def __init__(self, limit: int, *, shared: SharedSlots | None = None) -> None:
        self.limit = limit
        self.shared = shared
        self._local = asyncio.Semaphore(limit)
        self._running = 0
        self._waiting = 0

    @property
    def running(self) -> int:
        """Slots of this process held now."""
        return self._running

    @property
    def waiting(self) -> int:
        """Turns of this process waiting for a slot now."""
        return self._waiting

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the block (waiting for one); within a block that holds one already, that one.
        While the cluster's Redis cannot be reached, a new turn waits for it (as the work queue takes no
        new work then)."""
        if _HELD.get() is self:
            yield
            return
        self._waiting += 1
        waited = True
        try:
            async with self._local:
                if self.shared is None:
                    self._waiting, waited = self._waiting - 1, False
                    async with self._holding():
                        yield
                    return
                async with self.shared.slot(unreachable="wait"):
                    self._waiting, waited = self._waiting - 1, False
                    async with self._holding():
                        yield
        finally:
            if waited:  # cancelled (or failed) while waiting
                self._waiting -= 1

    @asynccontextmanager
    async def _holding(self) -> AsyncIterator[None]:
        token = _HELD.set(self)
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            _HELD.reset(token)
