"""The background loops of a cluster process never end unnoticed.

Each loop handles the failures it expects (Redis unreachable, the database away) itself. Anything else
— a bug, an error nobody foresaw — would end its task silently, and the process would look healthy
while, say, its work queue's keeper no longer reconnects to Redis or claims a dead worker's entries, or
a session lease is no longer renewed. :func:`supervised` runs such a loop: an exception escaping it is
logged with the loop's name and traceback, and the loop is started again after a pause that doubles
from ``pause`` up to :data:`PAUSE_MAX` while it keeps failing at once (so a bug does not spin). A loop
that returns has ended its own way (a resigned election, a drained reader); cancelling the supervisor
cancels the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

PAUSE_FIRST = 1.0  # seconds before a failed loop starts again
PAUSE_MAX = 30.0  # the longest pause; a loop that ran this long before failing starts from PAUSE_FIRST


async def supervised(name: str, loop: Callable[[], Awaitable[None]], *, pause: float = PAUSE_FIRST) -> None:
    """Run ``loop()`` until it returns, starting it again after each unexpected exception (logged)."""
    delay = pause
    while True:
        started = time.monotonic()
        try:
            await loop()
            return
        except Exception:
            if time.monotonic() - started >= PAUSE_MAX:
                delay = pause
            log.exception("%s failed unexpectedly; starting it again in %.1fs", name, delay)
        await asyncio.sleep(delay)
        delay = min(PAUSE_MAX, delay * 2)
