"""Session lanes: one job at a time per session key, different keys at once, the turn cap on all
(``gateway.intake.turn_cap``: the one cap the API's and cron's turns take a slot of too).

A lane exists only while its key has work: the first job creates it with a worker task, the worker
ends when the queue is empty, and nothing per chat is left behind (idle chats cost no memory).
Jobs hold the agent's per-session lock themselves (``agent.locks``), so the order here and the lock
across processes agree; the lane adds order (FIFO per chat), the busy policy and ``/stop``.

Contract: items are data (``gateway.intake.work.Work`` in the gateway); the lanes run each with the one
``run`` function given to :meth:`Lanes.serve`, which handles its own errors (an exception escaping it is
logged and the lane goes on). ``submit`` never blocks, and may be called only once ``serve`` was.
``cancel_running`` cancels the item that runs now with :data:`INTERRUPTED` as the cancellation message;
``shutdown`` cancels with :data:`SHUTTING_DOWN` so the runner can tell "the user stopped me" from
"resume me after the restart".
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from gateway.intake.turn_cap import TurnCap

log = logging.getLogger(__name__)


class Keyed(Protocol):
    @property
    def session_key(self) -> str: ...


Item = TypeVar("Item", bound=Keyed)

INTERRUPTED = "interrupted"
SHUTTING_DOWN = "shutting down"


@dataclass
class _Lane(Generic[Item]):
    queue: deque[Item] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None
    running: asyncio.Task[None] | None = None


class Lanes(Generic[Item]):
    def __init__(self, cap: TurnCap, *, on_depth: Callable[[int], None] | None = None) -> None:
        self._lanes: dict[str, _Lane[Item]] = {}
        self._run: Callable[[Item], Awaitable[None]] | None = None
        self._cap = cap
        self._on_depth = on_depth
        self._depth = 0
        self._closing = False  # set by shutdown: a job still waiting for the cap never starts

    @property
    def depth(self) -> int:
        """Jobs queued or running over all lanes."""
        return self._depth

    @property
    def active(self) -> int:
        """Keys with a lane now (idle keys have none)."""
        return len(self._lanes)

    async def busy(self, key: str) -> bool:
        lane = self._lanes.get(key)
        return lane is not None and lane.running is not None

    def serve(self, run: Callable[[Item], Awaitable[None]]) -> None:
        """Set what running an item means (once, before the first ``submit``)."""
        self._run = run

    def submit(self, item: Item) -> None:
        """Queue ``item`` in its session key's lane."""
        if self._run is None:
            raise RuntimeError("Lanes.serve was not called: nothing would run the work")
        key = item.session_key
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.queue.append(item)
        self._count(+1)
        if lane.worker is None:
            lane.worker = asyncio.create_task(self._work(key, lane), name=f"lane {key}")

    async def cancel_running(self, key: str) -> bool:
        """Cancel the job running in ``key``'s lane (``/stop``, the interrupt policy); True if one ran.
        Async for the cluster's sake (``gateway.intake.work.WorkQueue``); it awaits nothing, so a cancel
        and the ``submit`` after it keep their order."""
        lane = self._lanes.get(key)
        if lane is None or lane.running is None or lane.running.done():
            return False
        lane.running.cancel(INTERRUPTED)
        return True

    async def _work(self, key: str, lane: _Lane[Item]) -> None:
        assert self._run is not None
        try:
            while lane.queue:
                item = lane.queue.popleft()
                try:
                    async with self._cap.slot():
                        if self._closing:
                            continue  # its row stays pending: the next start answers it
                        lane.running = asyncio.ensure_future(self._run(item))
                        await asyncio.wait([lane.running])  # a cancelled job must not cancel the lane
                        _report(key, lane.running)
                finally:
                    lane.running = None
                    self._count(-1)
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    async def drain(self, seconds: float) -> bool:
        """Wait until every lane is empty or ``seconds`` pass; True when all work finished."""
        workers = [lane.worker for lane in self._lanes.values() if lane.worker is not None]
        if not workers:
            return True
        _, pending = await asyncio.wait(workers, timeout=seconds)
        return not pending and not self._lanes

    async def shutdown(self) -> None:
        """Cancel running jobs (as :data:`SHUTTING_DOWN`) and drop queued ones, including a job already
        taken off its queue that waits for the cap (it would otherwise start once the cap frees)."""
        self._closing = True
        lanes = list(self._lanes.values())
        for lane in lanes:
            self._count(-len(lane.queue))
            lane.queue.clear()
            if lane.running is not None and not lane.running.done():
                lane.running.cancel(SHUTTING_DOWN)  # once: a second would cut its checkpoint short
        workers = [lane.worker for lane in lanes if lane.worker is not None]
        if workers:  # each ends once its running job did (its queue is empty)
            await asyncio.wait(workers)

    def _count(self, change: int) -> None:
        self._depth += change
        if self._on_depth is not None:
            self._on_depth(self._depth)


def _report(key: str, task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("lane %s: a job failed", key, exc_info=error)
