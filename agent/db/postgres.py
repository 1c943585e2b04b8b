"""PostgreSQL: a pool of asyncpg connections; repositories' functions run on SQLAlchemy's async bridge.

A repository function takes a synchronous SQLAlchemy ``Connection`` (the same code serves SQLite);
``AsyncConnection.run_sync`` runs it on this pool without blocking the event loop. Reads and writes of
different sessions run concurrently.

A server that cannot be reached (down, restarting, a network partition, a dropped connection) is
:class:`StorageUnavailable`, never a crash: the caller decides to wait and retry. So is a pool whose
connections all stay busy past ``connect_timeout`` (hundreds of chats at once on a slow machine): the
gateway runs the turn again rather than failing it. Nothing is committed by an operation that raised
it, so a retry never doubles a write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from agent.db.base import Storage
from agent.db.errors import StorageUnavailable
from agent.db.migrate import current_revision
from agent.db.schema import metadata
from agent.db.urls import StorageUrl
from resilience.cancelling import CarriedThrough, cancel_and_wait

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors below SQLAlchemy that mean "the server is not there", by module and class name (looked up
# lazily: asyncpg is imported only when PostgreSQL is configured).
_UNREACHABLE = (ConnectionError, TimeoutError, OSError)
_ASYNCPG_UNREACHABLE = ("CannotConnectNowError", "ConnectionDoesNotExistError", "InterfaceError",
                        "ConnectionFailureError", "AdminShutdownError", "CrashShutdownError",
                        "TooManyConnectionsError")  # fmt: skip


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` means the database could not be reached (as opposed to a query's error)."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    cause: BaseException | None = error.orig if isinstance(error, DBAPIError) else error
    seen = 0
    while cause is not None and seen < 5:
        if isinstance(cause, _UNREACHABLE):
            return True
        if type(cause).__module__.startswith("asyncpg") and type(cause).__name__ in _ASYNCPG_UNREACHABLE:
            return True
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return isinstance(error, OperationalError | InterfaceError) and not isinstance(
        error, sa.exc.IntegrityError
    )


# A transaction here is one function run at once (``run_sync``): it never waits on anything but the
# server. One left open longer than this belongs to a process that stopped mid-transaction (SIGSTOP, a
# frozen VM, a partition); the server ends that session so the row and advisory locks it holds (a
# session's fencing row, say) do not stall every other process for as long as the process stays
# stopped. The stopped process finds its connection closed when it wakes, and its writes are fenced.
IDLE_IN_TRANSACTION_MS = 10_000


class PostgresStorage(Storage):
    """A PostgreSQL database at ``url``. Open with ``await PostgresStorage.open(url)``."""

    dialect = "postgresql"

    def __init__(self, url: StorageUrl, *, pool_size: int, connect_timeout: float) -> None:
        self.url = url
        self.description = url.redacted
        self._connections = pool_size * 2  # the pool, and as many again in bursts (max_overflow)
        self._pool_timeout = connect_timeout
        # Operations queue here, first come first served, for one of the connections. The pool's own
        # queue is not fair: an operation that just started can take a connection that came free ahead
        # of one that has been waiting, so with hundreds of chats at once some waited past the pool's
        # timeout while the pool was busy serving newer ones.
        self._turns = asyncio.Semaphore(self._connections)
        self._finishing = CarriedThrough()  # operations under way, whoever awaits them (see _operation)
        # SQLAlchemy's async bridge (with its ORM layer and greenlet, ~8 MiB): for PostgreSQL only
        from sqlalchemy.ext.asyncio import create_async_engine

        self._engine: AsyncEngine | None = create_async_engine(
            url.sqlalchemy,
            pool_size=pool_size,
            max_overflow=pool_size,
            # No ping per checkout (a round trip more on every operation): a connection the server
            # dropped fails its operation as StorageUnavailable, SQLAlchemy drops the pool's stale
            # connections, and the caller's retry gets a fresh one.
            pool_timeout=connect_timeout,
            connect_args={
                "timeout": connect_timeout,
                "command_timeout": 60,
                "server_settings": {"idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS)},
            },
            hide_parameters=True,  # an error's text never carries the values (people's messages)
        )

    @classmethod
    async def open(
        cls, url: StorageUrl, *, pool_size: int = 10, connect_timeout: float = 10.0
    ) -> PostgresStorage:
        """Connect once (so a server that is not there is reported at start-up)."""
        storage = cls(url, pool_size=pool_size, connect_timeout=connect_timeout)
        try:
            await storage.read(lambda conn: conn.execute(sa.text("SELECT 1")).scalar())
        except BaseException:
            await storage.close()
            raise
        return storage

    @property
    def closed(self) -> bool:
        return self._engine is None

    async def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            # Operations whose callers were cancelled end first, for a while; a query still running (at
            # most asyncpg's command_timeout) is cut.
            await cancel_and_wait(await self._finishing.wait(self._pool_timeout))
            await engine.dispose()

    def connections_out(self) -> int:
        engine = self._engine
        pool = None if engine is None else engine.sync_engine.pool
        return pool.checkedout() if isinstance(pool, sa.pool.QueuePool) else 0

    def _engine_or_fail(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError(f"the database {self.description} is closed")
        return self._engine

    async def read(self, fn: Callable[[sa.Connection], T]) -> T:
        async def run(engine: AsyncEngine) -> T:
            async with engine.connect() as conn:
                return await conn.run_sync(fn)

        return await self._operation(run)

    async def _transact(self, fn: Callable[[sa.Connection], T]) -> T:
        async def run(engine: AsyncEngine) -> T:
            async with engine.begin() as conn:
                return await conn.run_sync(fn)

        return await self._operation(run)

    async def _operation(self, run: Callable[[AsyncEngine], Awaitable[T]]) -> T:
        """``run`` on a connection once this operation's turn came, carried to its end even when the
        caller is cancelled meanwhile.

        A connection whose use is cancelled half-way is not reliably given back by SQLAlchemy's asyncio
        pool: it is terminated with asyncpg's "unexpected connection_lost()" logged as a future's
        exception nobody retrieved, or left for the garbage collector ("a non-checked-in connection was
        garbage collected", sqlalchemy#8145, #12077). So the caller's cancellation (a /stop, a drain's
        deadline) reaches the caller at once, and the operation, short by contract, ends on its own:
        committed or rolled back as if the caller had waited, its connection returned to the pool.
        :meth:`close` waits a while for such operations before closing the pool.
        """
        engine = self._engine_or_fail()
        try:
            async with asyncio.timeout(self._pool_timeout):
                await self._turns.acquire()
        except TimeoutError:
            raise self._busy() from None
        try:
            return await self._finishing.run(self._in_turn(run(engine)))
        except Exception as error:
            raise self._explain(error) from error

    async def _in_turn(self, operation: Awaitable[T]) -> T:
        try:
            return await operation
        finally:
            self._turns.release()

    def _busy(self) -> StorageUnavailable:
        return StorageUnavailable(
            f"the database {self.description} is busy: none of this process's {self._connections} "
            f"connections came free within {self._pool_timeout:g} s; raise storage.pool_size if this "
            "goes on"
        )

    async def run_sync(self, fn: Callable[[sa.Connection], T]) -> T:
        """``fn(conn)`` in one transaction (migrations: transactional DDL), never fenced."""
        return await self._transact(fn)

    def _explain(self, error: Exception) -> Exception:
        if isinstance(error, sa.exc.TimeoutError):  # the pool's checkout: every connection stayed busy
            return self._busy()
        if isinstance(error, StorageUnavailable) or not unreachable(error):
            return error
        detail = " ".join(str(error.orig if isinstance(error, DBAPIError) else error).split())[:200]
        return StorageUnavailable(
            f"the database {self.description} cannot be reached ({detail}); check that PostgreSQL is running "
            "and storage.url is right"
        )


TABLE_RIGHTS = ("SELECT", "INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class ServerFacts:
    """What ``herald doctor`` needs to know about a PostgreSQL database, read without changing it."""

    version: int  # server_version_num: 150018 for 15.18
    may_create: bool  # CREATE in schema public (migrations create tables)
    denied: list[tuple[str, str]]  # (table, right) the user lacks on Herald's tables that exist
    revision: str | None  # Alembic's revision (None: no Herald tables yet, or unreadable)
    unreadable: bool = False  # Herald's tables are there but their revision cannot be read


async def inspect_server(url: StorageUrl, *, connect_timeout: float) -> ServerFacts:
    """Connect to ``url`` with one connection and read its :class:`ServerFacts`; migrates nothing.
    Raises :class:`StorageUnavailable` when it cannot be reached."""
    storage = await PostgresStorage.open(url, pool_size=1, connect_timeout=connect_timeout)
    try:
        return await storage.read(server_facts)
    finally:
        await storage.close()


def server_facts(conn: sa.Connection) -> ServerFacts:
    version = int(conn.execute(sa.text("SHOW server_version_num")).scalar_one())
    may_create = bool(
        conn.execute(sa.text("SELECT has_schema_privilege(current_user, 'public', 'CREATE')")).scalar_one()
    )
    existing = set(sa.inspect(conn).get_table_names())
    denied = []
    for name in ["alembic_version", *(table.name for table in metadata.sorted_tables)]:
        if name not in existing:
            continue
        for right in TABLE_RIGHTS:
            allowed = conn.execute(
                sa.text("SELECT has_table_privilege(current_user, :table, :right)"),
                {"table": name, "right": right},
            ).scalar_one()
            if not allowed:
                denied.append((name, right))
    readable = "alembic_version" in existing and ("alembic_version", "SELECT") not in denied
    revision = current_revision(conn) if readable else None
    return ServerFacts(
        version, may_create, denied, revision, unreadable="alembic_version" in existing and not readable
    )
