"""Background loops never end unnoticed, and are stopped once.

A background loop handles the failures it expects (a server away) itself. Anything else — a bug, an
error nobody foresaw — would end its task silently, and the process would look healthy while, say, a
lease is no longer renewed. :func:`supervised` runs such a loop: an exception escaping it is logged
with the loop's name and traceback, and the loop is started again after a pause (:data:`PAUSES`, the
one :class:`~resilience.backoff.Backoff`) that grows while it keeps failing at once, so a bug does not
spin. A loop that returns has ended its own way; cancelling the supervisor cancels the loop.

:class:`BackgroundLoop` is the lifecycle every owner of such a task needs: ``start`` once, ``stop``
as often as it likes (the first stops the task and waits for its end, the others return at once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from resilience.backoff import Backoff, Streak
from resilience.cancelling import cancel_and_wait

log = logging.getLogger(__name__)

PAUSES = Backoff(first=1.0, cap=30.0)  # before a failed loop starts again
FRESH_AFTER = 30.0  # seconds: a loop that ran this long before failing starts again after the first pause

Body = Callable[[], Awaitable[None]]


async def supervised(name: str, body: Body, *, pauses: Backoff = PAUSES) -> None:
    """Run ``body()`` until it returns, starting it again after each unexpected exception (logged)."""
    streak = Streak(pauses)
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            await body()
            return
        except Exception:
            if loop.time() - started >= FRESH_AFTER:
                streak.reset()
            pause = streak.next_delay()
            log.exception("%s failed unexpectedly; starting it again in %.1fs", name, pause)
        await asyncio.sleep(pause)


class BackgroundLoop:
    """``body`` run in a task of its own, supervised (see the module), from :meth:`start` to :meth:`stop`.

    ``name`` says what it is in the log ("the leader election"). Also an async context manager: started
    on entry, stopped on exit."""

    def __init__(self, name: str, body: Body, *, pauses: Backoff = PAUSES) -> None:
        self.name = name
        self._body = body
        self._pauses = pauses
        self._task: asyncio.Task[None] | None = None
        self.stopping = False  # set by stop(): a body that outlives a swallowed cancellation asks it

    def start(self) -> BackgroundLoop:
        if self._task is not None:
            raise RuntimeError(f"{self.name} was started already")
        body = supervised(self.name, self._body, pauses=self._pauses)
        self._task = asyncio.create_task(body, name=self.name)
        return self

    @property
    def task(self) -> asyncio.Task[None]:
        """The running task (to wait for it along with others)."""
        if self._task is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._task

    @property
    def done(self) -> bool:
        """Whether the body ended (returned, or was stopped)."""
        return self._task is not None and self._task.done()

    async def stop(self) -> None:
        """Cancel the body and wait for its end. Idempotent; a loop never started is left as it is."""
        self.stopping = True
        task = self._task
        if task is None or task is asyncio.current_task():
            return
        await cancel_and_wait([task])  # its own cancellation is not this caller's

    def cancel(self) -> None:
        """Stop without waiting for the end (from a callback, which cannot wait)."""
        self.stopping = True
        if self._task is not None:
            self._task.cancel()

    async def __aenter__(self) -> BackgroundLoop:
        return self.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()
