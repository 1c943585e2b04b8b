"""Waiting out a database (or Redis) that cannot be reached: a state, not a failure.

An operation that raised :class:`~agent.db.errors.StorageUnavailable` committed nothing, so it can
be tried again once the server is back. :func:`until_reachable` is the one loop that does so for the
gateway's work (a chat's turn, a scheduled run, the next work of a chat): it backs off from
:data:`FIRST_WAIT` seconds, doubling up to :data:`MAX_WAIT` between tries (the one jittered backoff), for
as long as it takes; cancellation (the gateway stopping) ends the wait. An operator reads one warning
when the wait starts and one line when it ends, not one per try.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agent.db import StorageUnavailable
from resilience.backoff import Backoff

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_WAIT = 0.5
MAX_WAIT = 30.0
WAITS = Backoff(FIRST_WAIT, MAX_WAIT)


async def until_reachable(
    attempt: Callable[[bool], Awaitable[T]], what: str, *, waits: Backoff = WAITS
) -> T:
    """``await attempt(again)`` until it does not raise ``StorageUnavailable``; returns what it returned.

    ``again`` is False on the first try and True on every later one: the interrupted try may have stored
    part of its work, which the next one looks for rather than repeating. Any other exception is
    ``attempt``'s own and propagates. ``what`` names the work in the log ("inbox 12", "cron job ab12").
    ``waits``: a caller that must win a race once the server is back (the outbox sender recording a send)
    waits less between tries.
    """
    failed = 0
    while True:
        try:
            result = await attempt(failed > 0)
        except StorageUnavailable as error:
            failed += 1
            if failed == 1:
                log.warning("%s waits: %s", what, error)
            await asyncio.sleep(waits.delay(failed))
            continue
        if failed:
            log.info("%s: reachable again; done after %d wait(s)", what, failed)
        return result
