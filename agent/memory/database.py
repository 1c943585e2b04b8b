"""Memory in the ``memory_documents`` table: one row per (scope, document). Used with PostgreSQL, where
every gateway process (on any machine) must see the same memory.

Atomicity: an edit is one write transaction (``Storage.write``). On PostgreSQL the row is claimed with
``SELECT ... FOR UPDATE`` before the edit reads it, so concurrent edits of one document queue up and none
is lost; a document that has no row yet gets an empty one first (``INSERT ... ON CONFLICT DO NOTHING``:
two first edits at once meet on the same row). On SQLite the transaction holds the write lock from its
start. A failure rolls the whole edit back; it may be retried.

An empty row and a missing one mean the same: no entries.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import memory_documents as table
from agent.db.sql import insert_ignoring_duplicates
from agent.memory.entries import FILE_NAMES, TARGETS, Edit, MemoryTarget
from agent.memory.store import MemoryDocuments


class DatabaseMemoryDocuments(MemoryDocuments):
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.description = f"the database {storage.description}"

    def where(self, scope: str, target: MemoryTarget) -> str:
        return f"{FILE_NAMES[target]} of scope {scope}"

    async def read(self, scope: str, target: MemoryTarget) -> str | None:
        query = sa.select(table.c.text).where(table.c.scope == scope, table.c.target == target)
        return await self.storage.read(lambda conn: conn.execute(query).scalar())

    async def read_for_prompt(self, scope: str) -> dict[MemoryTarget, str | None]:
        query = sa.select(table.c.target, table.c.text).where(table.c.scope == scope)
        rows = await self.storage.read(lambda conn: {row.target: row.text for row in conn.execute(query)})
        return {target: rows.get(target) for target in TARGETS}

    async def update(self, scope: str, target: MemoryTarget, edit: Edit) -> str | None:
        key = (table.c.scope == scope, table.c.target == target)
        claim = sa.select(table.c.text).where(*key).with_for_update()

        def transact(conn: sa.Connection) -> str | None:
            current = conn.execute(claim).scalar()
            created = False
            if current is None:
                values = {"scope": scope, "target": target, "text": "", "updated_at": time.time()}
                created = insert_ignoring_duplicates(conn, table, values) == 1
                current = conn.execute(claim).scalar_one()  # ours, or the one another edit just committed
            new = edit(current)
            if new is not None:
                conn.execute(sa.update(table).where(*key).values(text=new, updated_at=time.time()))
            elif created:
                conn.execute(sa.delete(table).where(*key))
            return new

        return await self.storage.write(transact)

    async def scopes(self) -> list[str]:
        query = sa.select(table.c.scope).where(table.c.text != "").distinct()
        return sorted(await self.storage.read(lambda conn: list(conn.execute(query).scalars())))

    async def forget(self, scope: str) -> bool:
        statement = sa.delete(table).where(table.c.scope == scope)
        return await self.storage.write(lambda conn: (conn.execute(statement).rowcount or 0) > 0)
