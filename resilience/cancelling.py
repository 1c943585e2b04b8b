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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

AGAIN_EVERY = 1.0  # seconds between cancellations of a task that has not ended yet


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
