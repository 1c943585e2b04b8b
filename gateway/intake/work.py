"""Work for a chat's lane, as data: what to do, for which session, about which stored message.

A lane queues :class:`Work`, not closures, so that what waits in a queue can be written down — kept in
another process's queue, looked at in a test, counted — and the one :class:`gateway.intake.worker.Worker`
decides what doing it means. Work names its stored message by inbox id; the message itself is read
when the work runs (it is in the database from before the work was queued).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class WorkKind(StrEnum):
    MESSAGE = "message"  # answer the stored message with a turn of the agent
    COMMAND = "command"  # run the stored message's slash command in the lane (it touches the session)


@dataclass(frozen=True)
class Work:
    kind: WorkKind
    session_key: str
    inbox_id: int
    resumed: bool = False  # left unanswered by an earlier run: look for what that run did first


class WorkQueue(Protocol):
    """Where work waits for its chat's turn: one item at a time per session key, in order, different keys
    at once, a cap over all. ``gateway.intake.lanes.Lanes`` is the one-process implementation;
    ``gateway.cluster.queue.work_queue.RedisWorkQueue`` the cluster's (a chat's order there comes from the
    stored inbox: ``gateway.cluster.queue.chat_order``). Both keep this contract:

    - :meth:`serve` is called once, before the first :meth:`submit`, with what running an item means;
      ``run`` handles its own errors (an escaping exception is logged, the queue goes on).
    - :meth:`submit` never blocks; an item is run after every item of its key submitted before it.
    - :meth:`cancel_running` cancels the item running now for ``key`` (with ``INTERRUPTED`` as the
      cancellation message), wherever it runs; True when one was running (in a cluster: the cancel is
      recorded, and the process running it stops it). :meth:`busy` says whether one runs for ``key``.
      Both raise ``StorageUnavailable`` when they cannot tell (the cluster's Redis cannot be reached).
    - :meth:`drain` waits for the queued work to finish (True) or ``seconds`` to pass (False);
      :meth:`shutdown` cancels what runs (``SHUTTING_DOWN``) and starts nothing more: what was not done
      stays pending in the inbox and is run after the restart.
    """

    def serve(self, run: Callable[[Work], Awaitable[None]]) -> None: ...

    def submit(self, item: Work) -> None: ...

    async def cancel_running(self, key: str) -> bool: ...

    async def busy(self, key: str) -> bool: ...

    @property
    def depth(self) -> int: ...

    @property
    def active(self) -> int: ...

    async def drain(self, seconds: float) -> bool: ...

    async def shutdown(self) -> None: ...
