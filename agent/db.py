"""``state.db``: one SQLite connection on one dedicated thread, explicit write transactions, migrations.

All database work runs on a single thread, so SQLite gets one writer per process and the asyncio event
loop never blocks on disk. Writes use ``BEGIN IMMEDIATE``: the write lock is taken when the transaction
starts, so two processes on one file serialize cleanly (the second waits up to the busy timeout) and
never compute the same next position from a stale read.

Several components keep tables in the same file (the agent's sessions, the gateway's inbox and outbox,
...). Each registers its own migration list; ``schema_versions`` records how far each got.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
SCHEMA_VERSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)
Migration = Sequence[str]  # statements applied together in one transaction


class SchemaTooNew(Exception):
    """``state.db`` was written by a newer Herald; the message says what to do."""


class Database:
    """The SQLite file, reached only through :meth:`run` (reads) and :meth:`write` (transactions).

    Use as ``async with await Database.open(path) as db`` or call :meth:`close`. Functions passed to
    ``run``/``write`` execute on the database thread with the connection as first argument; they must
    not await anything and should be short.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-db")
        self._conn: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: Path) -> Database:
        db = cls(path)
        try:
            await db._submit(db._connect)
        except BaseException:
            await db.close()
            raise
        return db

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self._submit(conn.close)
        self._executor.shutdown(wait=True)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def _connect(self) -> None:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    async def _submit(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"the database {self.path} is closed")
        return self._conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the database thread, outside any transaction (for reads)."""
        return await self._submit(lambda: fn(self._connection()))

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside ``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls it all back."""

        def transact() -> T:
            conn = self._connection()
            with immediate(conn):
                return fn(conn)

        return await self._submit(transact)

    async def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        """Bring ``component``'s tables to ``len(migrations)``; returns the version found before."""
        return await self._submit(lambda: migrate(self._connection(), component, migrations))


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that holds SQLite's write lock from its first statement."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def migrate(conn: sqlite3.Connection, component: str, migrations: Sequence[Migration]) -> int:
    """Apply ``component``'s missing migrations, each in its own transaction."""
    with immediate(conn):
        conn.execute(SCHEMA_VERSIONS_TABLE)
        row = conn.execute("SELECT version FROM schema_versions WHERE component = ?", (component,)).fetchone()
        found = int(row[0]) if row else 0
    if found > len(migrations):
        raise SchemaTooNew(
            f"{component} tables in state.db have schema version {found}, newer than this Herald "
            f"knows ({len(migrations)}). Upgrade Herald or point HERALD_HOME at another directory."
        )
    for version in range(found, len(migrations)):
        with immediate(conn):
            current = conn.execute(
                "SELECT version FROM schema_versions WHERE component = ?", (component,)
            ).fetchone()
            if current is not None and int(current[0]) > version:
                continue  # another process migrated meanwhile
            for statement in migrations[version]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_versions (component, version) VALUES (?, ?) "
                "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                (component, version + 1),
            )
        log.debug("state.db: %s schema migrated to version %d", component, version + 1)
    return found
