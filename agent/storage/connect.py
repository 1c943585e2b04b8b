"""Opening the storage ``storage.url`` names, migrated to this Herald's schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agent.storage.base import Storage
from agent.storage.migrate import migrate
from agent.storage.urls import StorageUrl


@asynccontextmanager
async def open_storage(
    url: StorageUrl, *, pool_size: int = 10, connect_timeout: float = 10.0
) -> AsyncIterator[Storage]:
    """Connect, migrate, yield; closed on exit. A PostgreSQL server that cannot be reached raises
    :class:`~agent.storage.errors.StorageUnavailable` here, before anything else starts."""
    storage: Storage
    if url.dialect == "sqlite":
        from agent.storage.sqlite import SqliteStorage

        assert url.path is not None
        storage = await SqliteStorage.open(url.path)
    else:
        from agent.storage.postgres import PostgresStorage

        storage = await PostgresStorage.open(url, pool_size=pool_size, connect_timeout=connect_timeout)
    async with storage:
        await migrate(storage)
        yield storage
