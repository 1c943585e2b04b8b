"""``state.db``: one SQLite connection on one dedicated thread, explicit write transactions, migrations.

All database work runs on a single thread, so SQLite gets one writer per process and the asyncio event
loop never blocks on disk. Writes use ``BEGIN IMMEDIATE``: the write lock is taken when the transaction
starts, so two processes on one file serialize cleanly (the second waits up to the busy timeout) and
never compute the same next position from a stale read.

Several components keep tables in the same file (the agent's sessions, the gateway's inbox and outbox,
...). Each registers its own migration list; ``schema_versions`` records how far each got.

A file that cannot be used is reported in one place, :meth:`Database._submit`, through which all
database work passes: SQLite's errors for a damaged file become :class:`DatabaseDamaged` (a copy of the
file is saved first, before anything else touches it) and those for a file that cannot be opened or
written become :class:`DatabaseUnwritable`, each with a message that names the file and what to do.
The file is created private (0600; SQLite gives its -wal and -shm files the same mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from agent.private import PRIVATE_FILE, create_private_file

T = TypeVar("T")
log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
SCHEMA_VERSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)
Migration = Sequence[str]  # statements applied together in one transaction


class SchemaTooNew(Exception):
    """``state.db`` was written by a newer Herald; the message says what to do."""


class DatabaseError(Exception):
    """``state.db`` cannot be used; the message names the file and says what to do."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class DatabaseDamaged(DatabaseError):
    """The file is not a SQLite database or is corrupt; ``backup`` is the copy saved when it was found."""

    def __init__(self, path: Path, detail: str, backup: Path | None) -> None:
        saved = f"a copy was saved as {backup}" if backup else "no copy could be saved, so copy it first"
        super().__init__(
            f"the database {path} is damaged ({detail}); {saved}, and to start fresh run "
            f"`rm {path} {path}-wal {path}-shm` (sessions start over; config, memory and skills are kept).",
            path,
        )
        self.backup = backup


class DatabaseUnwritable(DatabaseError):
    """SQLite cannot open or write the file: read-only, in a folder that is not writable, disk full."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"cannot use the database {path} ({detail}); make the file and its folder writable "
            f"(chmod u+w {path} {path.parent}) and check there is disk space, or point HERALD_HOME at "
            "another directory.",
            path,
        )


_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_UNWRITABLE = {
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
}


def primary_code(error: sqlite3.DatabaseError) -> int:
    """SQLite's primary result code of ``error`` (extended codes carry it in the low byte)."""
    return int(getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF


def is_damage(error: sqlite3.DatabaseError) -> bool:
    """The file is not a database or is corrupt (as opposed to busy, locked or unwritable)."""
    return primary_code(error) in _DAMAGED


def save_damaged_copy(path: Path) -> Path | None:
    """Copy a damaged ``path`` (and its WAL, which may hold the latest writes) next to it, privately.

    Returns the copy, or None when none could be made (the file is gone, the disk is full).
    """
    backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        shutil.copyfile(path, backup)
        backup.chmod(PRIVATE_FILE)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, backup.with_name(backup.name + "-wal"))
    except OSError as error:
        log.error("could not save a copy of the damaged database %s: %s", path, error)
        return None
    return backup


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
        self._damage: DatabaseDamaged | None = None  # found once: later errors say the same

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
        with contextlib.suppress(OSError):  # if it cannot be created, SQLite says why below
            create_private_file(self.path)  # before SQLite creates it with the umask's mode
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
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.DatabaseError as error:
            explained = await self._explain(error)
            if explained is None:
                raise
            raise explained from error

    async def _explain(self, error: sqlite3.DatabaseError) -> DatabaseError | None:
        """Words of their own for a damaged or unusable file; None for any other SQLite error."""
        if is_damage(error):
            if self._damage is None:
                backup = await asyncio.to_thread(save_damaged_copy, self.path)
                self._damage = DatabaseDamaged(self.path, str(error), backup)
            return self._damage
        if primary_code(error) in _UNWRITABLE:
            return DatabaseUnwritable(self.path, str(error))
        return None

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
