"""The records adapters keep (``adapters.records``), in the gateway's database: one table for every
platform, each in its own namespace, so what an adapter recorded outlives a restart and is shared by
the processes of a cluster.

How the contract of :class:`~adapters.records.RecordStore` is kept: :meth:`StoredRecords.add` is an
insert that ignores a duplicate key (idempotent, also across processes); a child is inserted only in the
transaction that finds its parent; :meth:`StoredRecords.expire` is one conditional ``UPDATE`` that only
moves the expiry earlier; reads see every write that returned before them. Each ``add`` also drops
records kept long enough past their expiry, with their children, in the same transaction (skipping rows
another process is dropping at that moment). A database that cannot be reached raises
``agent.db.StorageUnavailable``, the ``resilience.unreachable.Unreachable`` the contract names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from adapters.records import JsonObject, RecordsPolicy, RecordStore, StoredRecord, checked
from agent.db import Storage, insert_ignoring_duplicates, upsert
from gateway.tables import adapter_records as records

PRUNE_BATCH = 500  # old records dropped per new one: a backlog drains over a few adds


class StoredRecords(RecordStore):
    """The ``adapter_records`` rows of one namespace (a platform's name)."""

    def __init__(
        self,
        storage: Storage,
        namespace: str,
        policy: RecordsPolicy,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.namespace = namespace
        self.keep_after_expiry = policy.keep_after_expiry
        self.clock = clock

    async def add(
        self, key: str, value: JsonObject, *, expires_at: float | None = None, parent: str | None = None
    ) -> None:
        row = self._row(key, value, expires_at, parent)

        def insert(conn: sa.Connection) -> None:
            self._drop_older_than(conn, self.clock() - self.keep_after_expiry)
            if parent is not None and self._select(conn, parent) is None:
                return  # a child lives only with its parent
            insert_ignoring_duplicates(conn, records, row)

        await self.storage.write(insert)

    async def put(self, key: str, value: JsonObject, *, expires_at: float | None = None) -> None:
        row = self._row(key, value, expires_at, None)
        keys = ["namespace", "key"]
        await self.storage.write(lambda conn: upsert(conn, records, row, keys, ["value", "expires_at"]))

    async def get(self, key: str) -> StoredRecord | None:
        def select(conn: sa.Connection) -> StoredRecord | None:
            row = self._select(conn, key)
            if row is None:
                return None
            query = sa.select(records.c.key, records.c.value).where(
                records.c.namespace == self.namespace, records.c.parent == key
            )
            children = {child: json.loads(value) for child, value in conn.execute(query)}
            return StoredRecord(key, json.loads(row.value), row.expires_at, children)

        return await self.storage.read(select)

    async def expire(self, key: str, at: float) -> None:
        statement = (
            sa.update(records)
            .where(
                records.c.namespace == self.namespace,
                records.c.key == key,
                sa.or_(records.c.expires_at.is_(None), records.c.expires_at > at),
            )
            .values(expires_at=at)
        )
        await self.storage.write(lambda conn: conn.execute(statement))

    async def delete(self, key: str) -> None:
        statement = sa.delete(records).where(
            records.c.namespace == self.namespace, sa.or_(records.c.key == key, records.c.parent == key)
        )
        await self.storage.write(lambda conn: conn.execute(statement))

    def _row(
        self, key: str, value: JsonObject, expires_at: float | None, parent: str | None
    ) -> dict[str, object]:
        text = json.dumps(checked(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return {
            "namespace": self.namespace,
            "key": key,
            "parent": parent,
            "value": text,
            "expires_at": expires_at,
            "created_at": self.clock(),
        }

    def _select(self, conn: sa.Connection, key: str) -> sa.Row[Any, Any] | None:
        query = sa.select(records.c.value, records.c.expires_at).where(
            records.c.namespace == self.namespace, records.c.key == key
        )
        return conn.execute(query).first()

    def _drop_older_than(self, conn: sa.Connection, horizon: float) -> None:
        """Forget up to :data:`PRUNE_BATCH` records of this namespace that expired before ``horizon``,
        with their children. Rows another transaction is pruning at the same moment are skipped (``SKIP
        LOCKED`` on PostgreSQL): two processes never wait for, or deadlock on, each other's housekeeping."""
        query = (
            sa.select(records.c.key)
            .where(records.c.namespace == self.namespace, records.c.expires_at < horizon)
            .limit(PRUNE_BATCH)
            .with_for_update(skip_locked=True)
        )
        old = list(conn.execute(query).scalars())
        if old:
            conn.execute(
                sa.delete(records).where(
                    records.c.namespace == self.namespace,
                    sa.or_(records.c.key.in_(old), records.c.parent.in_(old)),
                )
            )
