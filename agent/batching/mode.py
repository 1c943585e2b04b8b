"""Which requests go through a batch API: those made inside :func:`batching`, of a purpose that can wait.

The caller that knows the work can wait sets the mode around it (the cron runner for a job marked
``batch``, the reviews for ``agent.review_batch``); every request of a purpose in :data:`BATCHED` made
inside it (each tool round of the run) is sent as a batch of one, as long as its deadline allows. A
compression's summary inside the same run is not: nothing waits on it being cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

BATCHED = frozenset({"cron", "review"})  # purposes whose answers can wait for a batch


@dataclass(frozen=True)
class Batching:
    """Send requests as batches until ``deadline`` (the agent's clock): a batch not ended by then is
    cancelled and the request sent normally. ``run`` names a run that outlives its process (a job's
    ``cron:JOB:OCCURRENCE``): its batch is kept when the task is cancelled (a restart polls it on);
    without one, a cancelled task cancels its batch."""

    deadline: float
    run: str | None = None


_CURRENT: ContextVar[Batching | None] = ContextVar("batching", default=None)


@contextmanager
def batching(mode: Batching | None) -> Iterator[None]:
    """Requests made inside go through the batch API (``None``: no change)."""
    if mode is None:
        yield
        return
    token = _CURRENT.set(mode)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_batching(purpose: str) -> Batching | None:
    """The batch mode a request of ``purpose`` made here is sent in (None: a normal request)."""
    mode = _CURRENT.get()
    return mode if mode is not None and purpose in BATCHED else None


def wait_allowed(timeout: float, now: float) -> float:
    """How long a task that allows ``timeout`` seconds may run when it sends batches: until its deadline,
    and then ``timeout`` more for the normal request that may follow."""
    mode = _CURRENT.get()
    return timeout if mode is None else max(timeout, mode.deadline - now + timeout)
