"""What the elected process runs, as leader duties (``gateway.cluster.leader``): each an async context
manager that starts a thing on entry and stops it, quickly, on exit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from adapters.base import Adapter
from gateway.cluster.leader import Duty
from gateway.cron.scheduler import CronScheduler
from resilience.loops import BackgroundLoop


def receiving(adapter: Adapter, allowed: Callable[[], bool]) -> Duty:
    """The platform's inbound side (Telegram's polling or its webhook registration): ``start_receiving``
    on entry, ``stop_receiving`` on exit; sending goes on throughout. ``allowed``: whether the lease
    still holds by this process's clock (asked before every poll)."""

    @asynccontextmanager
    async def duty() -> AsyncIterator[None]:
        await adapter.start_receiving(allowed)
        try:
            yield
        finally:
            await adapter.stop_receiving()

    return duty


def scheduling(scheduler: CronScheduler) -> Duty:
    """APScheduler firing cron jobs; runs already going when the term ends finish where they are."""

    @asynccontextmanager
    async def duty() -> AsyncIterator[None]:
        await scheduler.start()
        try:
            yield
        finally:
            await scheduler.stop()

    return duty


def looping(name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> Duty:
    """A loop that runs for the whole term in a task of its own (the idle-review sweeper), supervised (an
    unexpected exception is logged and the loop goes on)."""

    def duty() -> BackgroundLoop:
        return BackgroundLoop(f"the {name}", loop)

    return duty
