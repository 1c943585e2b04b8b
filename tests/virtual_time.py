"""Virtual time for asyncio tests: the running loop's clock jumps to its next timer whenever nothing is
ready to run, so a test of a policy measured in seconds (lease renewals, backoffs) takes no real time
and cannot fail by the machine being slow.

Only for code that awaits timers and other tasks: a test inside :func:`virtual_time` must not wait on
real I/O (sockets, threads), whose readiness the jumping clock would not wait for.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class VirtualClock:
    now: float

    def time(self) -> float:
        return self.now


@contextmanager
def virtual_time() -> Iterator[VirtualClock]:
    """Make the running loop's time virtual for the block (``asyncio.sleep``, ``asyncio.timeout`` and
    ``loop.time()`` all follow it)."""
    loop = asyncio.get_running_loop()
    selector: selectors.BaseSelector = loop._selector  # type: ignore[attr-defined]
    clock = VirtualClock(loop.time())
    real_select = selector.select

    def select(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = real_select(0)
        if not ready and timeout is not None and timeout > 0:
            clock.now += timeout  # nothing to do until the next timer: go there at once
        return ready

    loop.time = clock.time  # type: ignore[method-assign]
    selector.select = select  # type: ignore[method-assign]
    try:
        yield clock
    finally:
        del loop.time
        del selector.select
