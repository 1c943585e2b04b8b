"""What ``/readyz`` asks besides the adapters and the database: one :class:`ReadinessCheck` per extra
dependency of this process (a cluster's Redis, its work queue)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadinessCheck:
    """``probe`` returns when ``name`` is usable and raises (its message says why) when it is not; the
    HTTP server bounds it in time."""

    name: str
    probe: Callable[[], Awaitable[None]]
