"""What the elected process runs, as leader duties (``gateway.cluster.leases.leader``): each an async context
manager that starts a thing on entry and stops it, quickly, on exit. A start cut off half-way (the term
ended meanwhile: the lease lapsed while the start waited on the database) stops what it had started, so
the next term can start it again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Protocol

from adapters.base import Adapter
from gateway.cluster.leases.leader import Duty
from resilience.loops import BackgroundLoop


def receiving(adapter: Adapter, allowed: Callable[[], bool]) -> Duty:
    """The platform's inbound side (Telegram's polling or its webhook registration): ``start_receiving``
    on entry, ``stop_receiving`` on exit; sending goes on throughout. ``allowed``: whether the lease
    still holds by this process's clock (asked before every poll)."""
    return _started_and_stopped(lambda: adapter.start_receiving(allowed), adapter.stop_receiving)


class Startable(Protocol):
    """What a leader starts for its term and stops at its end (``gateway.cron.scheduler.CronScheduler``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def scheduling(scheduler: Startable) -> Duty:
    """APScheduler firing cron jobs; runs already going when the term ends finish where they are."""
    return _started_and_stopped(scheduler.start, scheduler.stop)


def looping(name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> Duty:
    """A loop that runs for the whole term in a task of its own (the idle-review sweeper), supervised (an
    unexpected exception is logged and the loop goes on)."""

    def duty() -> BackgroundLoop:
        return BackgroundLoop(f"the {name}", loop)

    return duty


def _started_and_stopped(start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]) -> Duty:
    """``start()`` on entry and ``stop()`` on exit, and also when ``start()`` raised or was cancelled."""

    @asynccontextmanager
    async def duty() -> AsyncIterator[None]:
        try:
            await start()
        except BaseException:
            await stop()
            raise
        try:
            yield
        finally:
            await stop()

    return duty
