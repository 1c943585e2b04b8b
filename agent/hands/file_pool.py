"""The file tools' own threads: a few, bounded, and watched.

File operations block (they run in threads), and one can block for a long time: a slow network mount,
a disk that hangs. In asyncio's default executor such calls would take the threads every other
blocking call of the process needs (name lookups, other tools), and new chats would get no answer while
``/healthz`` said ok. Here they have :data:`WORKERS` threads of their own. A call that finds them all
busy waits up to :data:`QUEUE_SECONDS` for one (a model reading a dozen files at once is ordinary), and
is then refused with a sentence the model can pass on, never queued for good; :meth:`FilePool.starved`
tells ``/readyz`` when every thread has been stuck longer than :data:`STUCK_SECONDS`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from agent.tools.registry import ToolError

T = TypeVar("T")
WORKERS = 4
QUEUE_SECONDS = 30.0  # how long a call waits for a free thread before it is refused
STUCK_SECONDS = 60.0


class FilePool:
    """Runs file operations on :data:`WORKERS` threads of their own. ``clock`` is for tests."""

    def __init__(self, workers: int = WORKERS, clock: Callable[[], float] = time.monotonic) -> None:
        self.workers = workers
        self._clock = clock
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="herald-files")
        self._running: dict[int, float] = {}  # call number -> when it started
        self._numbers = itertools.count()
        self._free = asyncio.Semaphore(workers)  # taken for as long as a thread runs the call

    async def run(self, operation: Callable[[], T]) -> T:
        """``operation()`` on one of the pool's threads; a ToolError when none is free in time."""
        try:
            async with asyncio.timeout(QUEUE_SECONDS):
                await self._free.acquire()
        except TimeoutError:
            oldest = self._clock() - min(self._running.values(), default=self._clock())
            raise ToolError(
                f"The file tools are busy: {self.workers} operations are still running (the oldest for "
                f"{oldest:.0f} s, on a slow or hung disk?). Try again shortly."
            ) from None
        number = next(self._numbers)
        self._running[number] = self._clock()
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, operation)
        except BaseException:
            self._done(number)
            raise
        # A cancelled turn cannot stop a thread: the call holds its thread until the thread is done.
        future.add_done_callback(lambda _: self._done(number))
        return await asyncio.shield(future)

    def _done(self, number: int) -> None:
        del self._running[number]
        self._free.release()

    def starved(self) -> str | None:
        """Why the pool can take no call (every thread stuck longer than :data:`STUCK_SECONDS`), or None."""
        if len(self._running) < self.workers:
            return None
        oldest = self._clock() - min(self._running.values())
        newest = self._clock() - max(self._running.values())
        if newest < STUCK_SECONDS:
            return None
        return f"all {self.workers} threads stuck, the oldest for {oldest:.0f} s (a hung disk or mount?)"

    def close(self) -> None:
        """Stop taking calls; a thread still stuck in one is left to end on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
