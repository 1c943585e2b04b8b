"""The seam every repository runs on: a function of a SQLAlchemy connection, read or written.

Contract for callers (repositories):

- :meth:`Storage.write` runs ``fn(conn)`` in one transaction: all of it is committed or none of it
  (an exception rolls it back and is re-raised). On SQLite the transaction takes the write lock when
  it starts (``BEGIN IMMEDIATE``), so two processes on one file never compute the same next position
  from a stale read; on PostgreSQL it is an ordinary transaction (``READ COMMITTED``), so a function
  that reads-then-writes a row others may write claims it (``FOR UPDATE``) or writes in one statement.
- Fencing: inside a session lease that carries a fencing token, :meth:`Storage.write` first checks the
  token in the same transaction and raises :class:`~agent.db.fencing.FencedOut` (nothing written)
  when a newer holder has the session (:mod:`agent.db.fencing`). Implementations provide
  :meth:`Storage._transact`; the check is made here, so none can leave it out.
- :meth:`Storage.read` runs ``fn(conn)`` for reads; it must not write.
- ``fn`` runs synchronously: it must not await, and should be short. On SQLite every call runs on
  one database thread, one at a time (the event loop never blocks on disk); on PostgreSQL calls run
  concurrently on a pool of connections.
- Failures: :class:`~agent.db.errors.StorageUnavailable` when the server cannot be reached (no
  transaction was committed; retry later), :class:`~agent.db.errors.StorageError` subclasses for a
  database that cannot be used at all (damaged, unwritable, too new), and SQLAlchemy's own errors for
  everything else (a constraint, a bug).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Literal, TypeVar

from sqlalchemy import Connection

from agent.db.fencing import held_fences, with_fences

T = TypeVar("T")
Dialect = Literal["sqlite", "postgresql"]


class Storage(ABC):
    dialect: Dialect
    description: str  # where the data lives, for logs and doctor: a path, or a URL without its password

    @abstractmethod
    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` to read."""

    async def write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one transaction, fenced when the calling task holds a fenced lease."""
        fences = held_fences()
        return await self._transact(with_fences(fn, fences) if fences else fn)

    @abstractmethod
    async def _transact(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one transaction (the implementation's half of :meth:`write`)."""

    @abstractmethod
    async def close(self) -> None:
        """Close every connection; idempotent."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""

    def connections_out(self) -> int | None:
        """Connections taken from the pool and not given back yet: a number that keeps growing while
        the load does not is a leak (``gateway_db_connections_out``). None: no pool (SQLite keeps its
        one connection)."""
        return None

    async def __aenter__(self) -> Storage:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()
