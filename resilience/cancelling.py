"""Stopping tasks for good: cancel, wait for the end, and cancel again what did not end.

A cancellation can be lost inside a client library: one that turns ``CancelledError`` into its own
timeout error (``asyncio.timeout`` firing as the cancellation arrives), caught by the task's own retry
loop, which then goes on as if nothing had been asked. A shutdown that cancels such a task once and
waits for its end waits forever (a gateway's SIGTERM that never exits; seen under load with Redis
commands in a retry loop). :func:`cancel_and_wait` is the one way Herald stops tasks it owns: it cancels
again every :data:`AGAIN_EVERY` seconds until each has ended, so a lost cancellation costs a second,
not the shutdown.

Waiting itself can lose one too: on Python 3.11, ``asyncio.wait_for(event.wait(), t)`` returns normally
when the event is set just as the cancellation arrives, and a loop around it goes on. :func:`wait_event`
is the one way Herald waits for an event with a time limit.

The other way round, some work must not be cut off half-way by its caller's cancellation (a database
operation holding a connection, a batch stored but not yet dispatched): :class:`CarriedThrough` runs it
to its end while the caller is cancelled at once, and lets its owner wait for what is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Hashable, Iterable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

AGAIN_EVERY = 1.0  # seconds between cancellations of a task that has not ended yet
T = TypeVar("T")


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, message: str | None = None) -> None:
    """Cancel every one of ``tasks`` (with ``message``, which the task may read to tell a shutdown from
    an interruption) and return once each has ended. What they ended with is not raised here (it is the
    task's own: cancelled, or an error its owner reads or logs); the caller's own cancellation is."""
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel(message)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=AGAIN_EVERY)
        for task in pending:
            log.debug("%s did not end when cancelled (a cancellation lost in a library?): cancelling it "
                      "again", _name(task))  # fmt: skip
            task.cancel(message)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:  # noqa: ASYNC109 - the point of it
    """Wait until ``event`` is set or ``timeout`` seconds have passed; whether it is set. A cancellation
    is always raised (``asyncio.timeout``, not 3.11's ``wait_for``: see the module)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)


class CarriedThrough:
    """Work carried to its end even when the caller awaiting it is cancelled.

    :meth:`run` returns the work's result or raises its error, like awaiting it; a cancelled caller
    gets ``CancelledError`` at once while the work goes on in a task of its own (its error, if any, is
    retrieved, never logged as lost). Work run with a ``key`` (an outbox item's id) can be asked about
    by it: :meth:`carrying` says whether it still runs, so its owner does not start it a second time.
    :meth:`wait` is for the owner's close: it waits up to ``timeout`` for the work still running and
    returns what did not end (for :func:`cancel_and_wait`, or to let go).
    """

    def __init__(self) -> None:
        self._running: dict[asyncio.Future[Any], Hashable | None] = {}  # the work still running -> its key

    async def run(self, work: Awaitable[T], *, key: Hashable | None = None) -> T:
        task = asyncio.ensure_future(work)
        self._running[task] = key
        task.add_done_callback(self._ended)
        return await asyncio.shield(task)

    def carrying(self, key: Hashable) -> bool:
        """Whether work :meth:`run` with ``key`` is still running (its caller may be long gone). Work
        run without a key is never found by one."""
        return key is not None and key in self._running.values()

    async def wait(self, timeout: float) -> set[asyncio.Future[Any]]:  # noqa: ASYNC109 - a bounded wait
        if not self._running:
            return set()
        _, late = await asyncio.wait(set(self._running), timeout=timeout)
        return late

    def _ended(self, task: asyncio.Future[Any]) -> None:
        self._running.pop(task, None)
        if not task.cancelled():
            task.exception()  # retrieved: a caller cancelled meanwhile no longer awaits it
