"""One chat's messages reach the sink one at a time, in the order the gateway dispatched them.

discord.py runs every event handler in its own task, so two messages of one channel could reach
the sink concurrently, or overtake each other while one waits for the database. :class:`ChatQueues`
restores the contract: :meth:`ChatQueues.submit` is called synchronously while discord.py parses
the gateway event (so submission order is the gateway's order), and one worker per chat
hands its items over one by one; different chats do not wait for each other. A worker exists only
while its chat has something queued, so idle chats cost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
QUEUE_LIMIT = 1000  # per chat: beyond this the sink is stuck, and newer messages are dropped


class ChatQueues(Generic[T]):
    """Per-key FIFO queues drained by ``handle``; ``handle`` should not raise (it is logged if it does)."""

    def __init__(self, handle: Callable[[T], Awaitable[None]], *, limit: int = QUEUE_LIMIT) -> None:
        self._handle = handle
        self._limit = limit
        self._queues: dict[str, deque[T]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    def submit(self, key: str, item: T) -> bool:
        """Queue ``item`` behind the chat's earlier items; False when closed or the chat is full."""
        if self._closed:
            return False
        queue = self._queues.setdefault(key, deque())
        if len(queue) >= self._limit:
            log.error("Dropping a Discord message for chat %s: %d are already waiting", key, len(queue))
            return False
        queue.append(item)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"discord-chat-{key}")
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    def queued(self) -> int:
        """Items not handed over yet (including the ones being handed over now)."""
        return sum(len(q) for q in self._queues.values())

    async def close(self, timeout: float) -> int:  # noqa: ASYNC109 - a bound on shutdown is the point
        """Take nothing more, cancel the workers (a hand-over in progress included) and wait for
        them at most ``timeout`` seconds; returns how many queued items were never handed over."""
        self._closed = True
        dropped = self.queued()
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        if workers:
            await asyncio.wait(workers, timeout=timeout)
        self._queues.clear()
        return dropped

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                try:
                    await self._handle(queue[0])
                except Exception:
                    log.exception("Handing a Discord message of chat %s to the gateway failed", key)
                with contextlib.suppress(IndexError):  # close() may have cleared it meanwhile
                    queue.popleft()
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)
