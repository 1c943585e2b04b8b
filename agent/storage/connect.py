"""Opening the storage ``storage.url`` names, migrated to this Herald's schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agent.storage.base import Storage
from agent.storage.migrate import current_revision, head_revision, migrate
from agent.storage.urls import StorageUrl


@asynccontextmanager
async def open_storage(
    url: StorageUrl,
    *,
    pool_size: int = 10,
    connect_timeout: float = 10.0,
    read_only: bool = False,
    exclusive: bool = False,
) -> AsyncIterator[Storage]:
    """Connect, migrate, yield; closed on exit. A PostgreSQL server that cannot be reached raises
    :class:`~agent.storage.errors.StorageUnavailable` here, before anything else starts.

    ``read_only``: the caller only reads (reports, listings). An existing SQLite file at this Herald's
    schema is then opened read-only, so the command works on a read-only home and writes nothing; one
    that needs migrating (or is not there yet) is opened as usual. ``exclusive``: no other process may
    use the SQLite file while it is open (:mod:`agent.storage.in_use`; ``herald storage migrate``)."""
    storage: Storage | None = None
    if url.dialect == "sqlite":
        from agent.storage.sqlite import SqliteStorage

        assert url.path is not None
        if read_only:
            storage = await _open_sqlite_read_only(url.path)
        if storage is None:
            storage = await SqliteStorage.open(url.path, exclusive=exclusive)
    else:
        from agent.storage.postgres import PostgresStorage

        storage = await PostgresStorage.open(url, pool_size=pool_size, connect_timeout=connect_timeout)
    async with storage:
        await migrate(storage)
        yield storage


async def _open_sqlite_read_only(path: Path) -> Storage | None:
    """The SQLite file opened read-only, or None when it must be opened to write (it does not exist, or
    it needs migrating first)."""
    from agent.storage.sqlite import SqliteStorage

    if not await asyncio.to_thread(path.exists):
        return None
    storage = await SqliteStorage.open(path, read_only=True)
    try:
        if await storage.read(current_revision) == head_revision():
            return storage
    except BaseException:
        await storage.close()
        raise
    await storage.close()
    return None
