"""Fencing tokens: a process that lost its session lease cannot write for that session any more.

A cross-process lease (``gateway.cluster.leases.session_locks``) can be lost without its holder noticing: a
holder paused past its lease (GC, SIGSTOP, a network partition) wakes up still believing it holds it.
So each acquisition of a session's lease takes a *fencing token* — :func:`issue_token`, a counter per
session key in ``session_fences`` that only grows — and the store refuses a write made under an older
token than the newest the key has seen.

How it is enforced, once, for every repository: the lock's ``hold`` puts a :class:`Fence` in a
``ContextVar`` of the holding task (:func:`fenced`; tasks the holder starts inherit it), and
:meth:`agent.db.base.Storage.write` checks every fence of the calling task inside the write's own
transaction (:func:`check_fences`), before ``fn`` runs. A stale fence makes the whole transaction write
nothing and raise :class:`FencedOut`: no half turn, no queued reply. With no fence (one process, no
cluster, or code outside any lease) there is no check and no cost.

A task keeps the fences of the context it was started in: a task started inside a lease writes
fenced by it (a turn's event consumer, a tool's helper), also after the block ended. So a task that
serves the whole process (a queue's worker, a sender) must be started outside any lease.

Why the counter lives in the database, not in Redis: the database is the one place the check can be
made atomically with the write, and Redis keeps nothing that matters (it may restart empty; a counter
that started again at 1 would fence a session out for good). The lease itself stays in Redis.

Ordering: the check is ``INSERT ... ON CONFLICT DO UPDATE ... WHERE token <= :mine``, which locks the
key's row until the transaction ends (PostgreSQL; SQLite's write transactions run alone anyway). A new
holder's :func:`issue_token` therefore waits for an old holder's write in flight, and every write of
the old holder that starts after it is refused. The new holder reads the session only after its token
is recorded, so it sees every write the old holder made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa

from agent.db.errors import StorageError
from agent.db.schema import session_fences
from agent.db.sql import insert_for

if TYPE_CHECKING:
    from agent.db.base import Storage

T = TypeVar("T")


class FencedOut(StorageError):
    """The session's lease was taken over by a newer holder: this write (and the rest of the work that
    made it) is refused, nothing of the transaction was stored. Not to be retried: the newer holder has
    the session now."""

    def __init__(self, key: str, token: int, newest: int | None) -> None:
        super().__init__(
            f"session {key!r}: this process's lease (fencing token {token}) was taken over by a newer "
            f"holder (token {newest}); its write was refused and its work on the session is abandoned"
        )
        self.key = key
        self.token = token
        self.newest = newest


@dataclass(frozen=True)
class Fence:
    """Writes of the holding task are valid only while ``token`` is the newest of ``key``."""

    key: str
    token: int


_fences: ContextVar[tuple[Fence, ...]] = ContextVar("herald_fences", default=())


def held_fences() -> tuple[Fence, ...]:
    """The fences of the running task (and of the task that started it): empty outside any lease."""
    return _fences.get()


@contextmanager
def fenced(fence: Fence) -> Iterator[None]:
    """Fence every write of this task (and of tasks started inside the block) with ``fence``."""
    reset = _fences.set((*_fences.get(), fence))
    try:
        yield
    finally:
        _fences.reset(reset)


def with_fences(fn: Callable[[sa.Connection], T], fences: tuple[Fence, ...]) -> Callable[[sa.Connection], T]:
    """``fn`` preceded, in its transaction, by the check of ``fences``."""

    def checked(conn: sa.Connection) -> T:
        check_fences(conn, fences)
        return fn(conn)

    return checked


def check_fences(conn: sa.Connection, fences: tuple[Fence, ...]) -> None:
    """Record each fence's token as its key's newest, or raise :class:`FencedOut` when a newer one is
    recorded. Keys in sorted order: two transactions never wait for each other's rows crosswise."""
    for fence in sorted(fences, key=lambda fence: fence.key):
        statement = insert_for(conn, session_fences).values(session_key=fence.key, token=fence.token)
        statement = statement.on_conflict_do_update(
            index_elements=[session_fences.c.session_key],
            set_={"token": statement.excluded.token},
            where=session_fences.c.token <= statement.excluded.token,
        ).returning(session_fences.c.token)
        if conn.execute(statement).first() is None:
            raise FencedOut(fence.key, fence.token, conn.execute(_newest(fence.key)).scalar())


def next_token(conn: sa.Connection, key: str) -> int:
    """The key's next fencing token (1 for a key never seen), recorded as its newest."""
    statement = insert_for(conn, session_fences).values(session_key=key, token=1)
    statement = statement.on_conflict_do_update(
        index_elements=[session_fences.c.session_key],
        set_={"token": session_fences.c.token + 1},
    ).returning(session_fences.c.token)
    return int(conn.execute(statement).scalar_one())


async def issue_token(storage: Storage, key: str) -> int:
    """Take the key's next fencing token (called by a lock right after it won the key's lease)."""
    return await storage.write(lambda conn: next_token(conn, key))


async def newest_token(storage: Storage, key: str) -> int | None:
    """The newest fencing token recorded for ``key`` (None: never fenced)."""
    return await storage.read(lambda conn: conn.execute(_newest(key)).scalar())


def _newest(key: str) -> sa.Select[int]:
    return sa.select(session_fences.c.token).where(session_fences.c.session_key == key)
