"""SQLite: one file, one connection on one dedicated thread, explicit write transactions.

All database work of a process runs on a single thread, so SQLite gets one writer per process and the
event loop never blocks on disk. Writes use ``BEGIN IMMEDIATE``: the write lock is taken when the
transaction starts, so two processes on one file serialize cleanly (the second waits up to the busy
timeout) and never compute the same next position from a stale read. The file is in WAL mode (readers
never wait for the writer) and created private (0600; SQLite gives its -wal and -shm files the same
mode).

A file that cannot be used is reported in one place, :meth:`SqliteStorage._submit`, through which all
database work passes: SQLite's errors for a damaged file become :class:`DatabaseDamaged` (a copy of
the file is saved first, before anything else touches it) and those for a file that cannot be opened
or written become :class:`DatabaseUnwritable`, each with a message that names the file and what to do.
A write lock another process held past the busy timeout is :class:`StorageUnavailable`: nothing was
written, and the caller may try again (the gateway does).

SQLAlchemy runs on the same ``sqlite3`` connection (``creator`` + ``StaticPool``), which stays in the
driver's autocommit mode: this module emits ``BEGIN IMMEDIATE`` itself and ends the transaction with
the SQLAlchemy connection's ``commit()`` / ``rollback()``.

A process that opens the file to write holds its in-use lock (:mod:`agent.db.in_use`) while it
is open, shared, or exclusive for ``herald storage migrate``. A command that only reads (``herald
insights``, ``memory show`` ...) opens it read-only (:func:`connect_read_only`): no lock, no pragma
that writes, nothing created beside it, so it works on a read-only file system too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from agent.db.base import Storage
from agent.db.errors import (
    DatabaseDamaged,
    DatabaseUnwritable,
    StorageError,
    StorageUnavailable,
    save_damaged_copy,
)
from agent.db.in_use import claim
from agent.files.private import create_private_file

T = TypeVar("T")

BUSY_TIMEOUT_MS = 10_000
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


def connect_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection to the existing file ``path`` that cannot write it and creates nothing.

    SQLite opens a WAL file read-only when its ``-shm`` and ``-wal`` files are there (a process has it
    open, or one was killed) or can be created; on a read-only file system after a clean close they are
    neither, and then the file is opened ``immutable``, which is right exactly then: with no ``-wal``
    file, everything is in the main file."""
    quoted = urllib.parse.quote(str(path.resolve()))
    options = {"check_same_thread": False, "isolation_level": None, "uri": True}
    raw = sqlite3.connect(f"file:{quoted}?mode=ro", timeout, **options)  # type: ignore[arg-type]
    try:
        raw.execute("PRAGMA schema_version").fetchone()  # the first read opens the WAL files, if any
    except sqlite3.OperationalError as error:
        raw.close()
        wal = path.with_name(path.name + "-wal")
        if primary_code(error) != sqlite3.SQLITE_CANTOPEN or wal.exists() or os.access(path.parent, os.W_OK):
            raise
        raw = sqlite3.connect(f"file:{quoted}?immutable=1", timeout, **options)  # type: ignore[arg-type]
    except BaseException:
        raw.close()
        raise
    return raw


class ReadOnlyStorage(RuntimeError):
    """A write through storage opened read-only: a command that said it only reads wrote (a bug)."""


class SqliteStorage(Storage):
    """``state.db``. Open with ``await SqliteStorage.open(path)``; use as an async context manager or
    call :meth:`close`. ``read_only``: for a command that only reads (the file must exist); ``exclusive``:
    no other process may use the file meanwhile (``herald storage migrate``)."""

    dialect = "sqlite"

    def __init__(self, path: Path, *, read_only: bool = False, exclusive: bool = False) -> None:
        self.path = path
        self.description = str(path)
        self.read_only = read_only
        self._exclusive = exclusive
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="herald-db")
        self._raw: sqlite3.Connection | None = None
        self._conn: sa.Connection | None = None
        self._engine: sa.Engine | None = None
        self._claim: int | None = None  # the descriptor holding the in-use lock
        self._damage: DatabaseDamaged | None = None  # found once: later errors say the same

    @classmethod
    async def open(cls, path: Path, *, read_only: bool = False, exclusive: bool = False) -> SqliteStorage:
        storage = cls(path, read_only=read_only, exclusive=exclusive)
        try:
            await storage._submit(storage._connect)
        except BaseException:
            await storage.close()
            raise
        return storage

    @property
    def closed(self) -> bool:
        return self._raw is None

    async def close(self) -> None:
        if self._raw is not None or self._claim is not None:  # a claim alone: connecting failed after it
            await self._submit(self._disconnect)
        self._executor.shutdown(wait=True)

    def _connect(self) -> None:
        if self.read_only:
            raw = connect_read_only(self.path, BUSY_TIMEOUT_MS / 1000)
        else:
            self._claim = claim(self.path, exclusive=self._exclusive)  # released by _disconnect
            with contextlib.suppress(OSError):  # if it cannot be created, SQLite says why below
                create_private_file(self.path)  # before SQLite creates it with the umask's mode
            raw = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
            )
        try:
            raw.row_factory = sqlite3.Row
            if not self.read_only:
                raw.execute("PRAGMA journal_mode=WAL")
                raw.execute("PRAGMA synchronous=NORMAL")
            raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            raw.execute("PRAGMA foreign_keys=ON")
            engine = sa.create_engine(  # an error's text never carries the values (people's messages)
                "sqlite://", creator=lambda: raw, poolclass=StaticPool, hide_parameters=True
            )
            conn = engine.connect()
        except BaseException:
            raw.close()
            raise
        self._raw, self._engine, self._conn = raw, engine, conn

    def _disconnect(self) -> None:
        raw, conn, engine = self._raw, self._conn, self._engine
        self._raw = self._conn = self._engine = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        if engine is not None:
            engine.dispose()
        if raw is not None:
            raw.close()
        if self._claim is not None:
            os.close(self._claim)  # releases the in-use lock
            self._claim = None

    async def _submit(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()  # the caller's, as asyncio.to_thread passes it (its logs' bot)
        try:
            return await loop.run_in_executor(self._executor, context.run, fn, *args)
        except (sqlite3.DatabaseError, DBAPIError) as error:
            explained = await self._explain(error)
            if explained is None:
                raise
            raise explained from error

    async def _explain(self, error: sqlite3.DatabaseError | DBAPIError) -> StorageError | None:
        """Words of their own for a damaged, unusable or busy file; None for any other SQLite error."""
        cause = error.orig if isinstance(error, DBAPIError) else error
        if not isinstance(cause, sqlite3.DatabaseError):
            return None
        if is_damage(cause):
            if self._damage is None:
                backup = await asyncio.to_thread(save_damaged_copy, self.path)
                self._damage = DatabaseDamaged(self.path, str(cause), backup)
            return self._damage
        if primary_code(cause) in _UNWRITABLE:
            return DatabaseUnwritable(self.path, str(cause))
        if primary_code(cause) == sqlite3.SQLITE_BUSY:  # another process's write outlasted the wait
            return StorageUnavailable(
                f"the database {self.path} is busy: another Herald process kept it locked for more than "
                f"{BUSY_TIMEOUT_MS / 1000:g} s; try again in a moment"
            )
        return None

    def _connection(self) -> tuple[sqlite3.Connection, sa.Connection]:
        if self._raw is None or self._conn is None:
            raise RuntimeError(f"the database {self.path} is closed")
        return self._raw, self._conn

    async def read(self, fn: Callable[[sa.Connection], T]) -> T:
        def run() -> T:
            _, conn = self._connection()
            try:
                return fn(conn)
            finally:
                conn.rollback()  # ends SQLAlchemy's implicit transaction; nothing is open on SQLite

        return await self._submit(run)

    async def _transact(self, fn: Callable[[sa.Connection], T]) -> T:
        if self.read_only:
            raise ReadOnlyStorage(f"{self.path} was opened read-only, for a command that only reads")

        def transact() -> T:
            raw, conn = self._connection()
            raw.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.rollback()
                if raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
            conn.commit()
            if raw.in_transaction:  # nothing was executed through SQLAlchemy: commit ourselves
                raw.execute("COMMIT")
            return result

        return await self._submit(transact)

    async def run_sync(self, fn: Callable[[sa.Connection], T]) -> T:
        """Run ``fn(conn)`` with the connection as it is (no transaction of ours): for migrations,
        which manage their own."""

        def run() -> T:
            _, conn = self._connection()
            return fn(conn)

        return await self._submit(run)


# --- a read-only look, for ``herald doctor`` ---------------------------------------------------------


class Integrity(StrEnum):
    SOUND = "sound"
    DAMAGED = "damaged"  # not a database, or SQLite's check found problems
    UNREADABLE = "unreadable"  # could not be opened or read (permissions, locked)


@dataclass(frozen=True)
class IntegrityReport:
    state: Integrity
    detail: str  # SQLite's words: its error, or the first problems its check found


def check_integrity(path: Path) -> IntegrityReport:
    """SQLite's own integrity check of the existing file ``path``. Nothing is created, migrated or
    repaired, so it is safe on a damaged file. Blocking: run it in a thread."""
    try:
        raw = connect_read_only(path, timeout=5)
        try:
            rows = [str(row[0]) for row in raw.execute("PRAGMA integrity_check").fetchall()]
        finally:
            raw.close()
    except sqlite3.DatabaseError as error:
        return IntegrityReport(Integrity.DAMAGED if is_damage(error) else Integrity.UNREADABLE, str(error))
    problems = [row for row in rows if row != "ok"]
    if problems:
        return IntegrityReport(Integrity.DAMAGED, "; ".join(problems[:3]))
    return IntegrityReport(Integrity.SOUND, "")
