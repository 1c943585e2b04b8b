"""Transitional: the ``sqlite3`` face of ``agent.storage.sqlite.SqliteStorage`` for repositories that are
not yet written against SQLAlchemy. Each repository moves to :class:`agent.storage.base.Storage`; when
the last has moved, this module goes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from agent.storage.errors import DatabaseDamaged, DatabaseUnwritable, SchemaTooNew
from agent.storage.errors import StorageError as DatabaseError
from agent.storage.migrate import migrate
from agent.storage.sqlite import SqliteStorage, is_damage

T = TypeVar("T")

__all__ = ["Database", "DatabaseDamaged", "DatabaseError", "DatabaseUnwritable", "SchemaTooNew", "is_damage"]


class Database:
    """``state.db`` for repositories that still take a ``sqlite3.Connection``."""

    def __init__(self, storage: SqliteStorage, *, owned: bool = False) -> None:
        self.storage = storage
        self.path = storage.path
        self._owned = owned

    @classmethod
    async def open(cls, path: Path) -> Database:
        """Open ``path``, migrated to this Herald's schema; closing the result closes the file."""
        storage = await SqliteStorage.open(path)
        try:
            await migrate(storage)
        except BaseException:
            await storage.close()
            raise
        return cls(storage, owned=True)

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owned:
            await self.storage.close()

    @property
    def closed(self) -> bool:
        return self.storage.closed

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.storage.legacy_read(fn)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.storage.legacy_write(fn)
