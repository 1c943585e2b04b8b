"""Who pays for the model requests made now: a :class:`Charge`, held by the task that makes them.

The gateway decides which scopes a request is charged to (the bot, a chat, a person, a scheduled job)
and their limits, and runs the work inside :func:`charging`; every model request made in that task (and
in the tasks it starts: sub-agents, a compression) is checked against, and counted in, those scopes.
As with the session lease's fences (``agent.db.fencing``), a ``ContextVar`` carries it, so no call
site between the gateway and :class:`agent.model_calls.ModelCalls` can drop it on the way. A request
made outside any charge is charged to the gate's default (the bot).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from agent.spending.windows import WindowKind


@dataclass(frozen=True)
class Limit:
    window: WindowKind
    usd: float


@dataclass(frozen=True)
class Scope:
    """One thing that spends: ``kind`` ("bot", "chat", "person", "cron") and its ``id`` (a session key, a
    ``platform:user_id``, a job id; empty for the bot), with the limits that apply to it. ``run`` is the
    occurrence a per-run limit counts in (a scheduled job's run)."""

    kind: str
    id: str = ""
    limits: tuple[Limit, ...] = ()
    run: str | None = None

    @property
    def key(self) -> str:
        """The scope's name in the database and in Redis: ``bot``, ``chat:telegram:dm:42`` ..."""
        return f"{self.kind}:{self.id}" if self.id else self.kind


@dataclass(frozen=True)
class Charge:
    """The scopes a request counts in. ``exempt``: checked against nothing (an exempt admin), counted all
    the same."""

    scopes: tuple[Scope, ...]
    exempt: bool = False


_current: ContextVar[Charge | None] = ContextVar("herald_charge", default=None)


def current_charge() -> Charge | None:
    return _current.get()


@contextmanager
def charging(charge: Charge) -> Iterator[Charge]:
    """Charge the model requests made in this block (and in tasks started in it) to ``charge``."""
    token = _current.set(charge)
    try:
        yield charge
    finally:
        _current.reset(token)
