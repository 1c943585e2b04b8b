"""Discord's slash-command interactions in the database: the records the Discord adapter keeps
(``adapters.discord.interaction_records``), stored so that a deferred command is answered after a
restart, or by another process, while its token lives.

Contract (the adapter's, see :class:`~adapters.discord.interaction_records.InteractionRecords`):
``remember`` and ``add_message`` insert ignoring duplicates (idempotent, also across processes);
``expire`` is one conditional ``UPDATE`` that only moves the expiry earlier; reads see every write that
returned before them. ``remember`` also drops records kept long enough past their expiry, with their
messages, in the same transaction (skipping rows another process is dropping at that moment).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from adapters.discord.interaction_records import (
    KEEP_AFTER_EXPIRY,
    InteractionRecord,
    InteractionRecords,
    Role,
)
from agent.db import Storage, insert_ignoring_duplicates
from gateway.tables import discord_interaction_messages as messages
from gateway.tables import discord_interactions as interactions

PRUNE_BATCH = 500  # old records dropped per new one: a backlog drains over a few commands


class StoredInteractions(InteractionRecords):
    """The ``discord_interactions`` and ``discord_interaction_messages`` tables."""

    def __init__(self, storage: Storage, *, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock

    async def remember(self, record: InteractionRecord) -> None:
        values = {
            "id": record.id,
            "application_id": record.application_id,
            "token": record.token,
            "channel_id": record.channel_id,
            "command": record.command,
            "ephemeral": record.ephemeral,
            "deferred": record.deferred,
            "expires_at": record.expires_at,
            "created_at": self.clock(),
        }

        def insert(conn: sa.Connection) -> None:
            _drop_older_than(conn, self.clock() - KEEP_AFTER_EXPIRY)
            insert_ignoring_duplicates(conn, interactions, values)

        await self.storage.write(insert)

    async def find(self, interaction_id: str) -> InteractionRecord | None:
        return await self.storage.read(lambda conn: _record(conn, interaction_id))

    async def owner_of(self, message_id: str) -> InteractionRecord | None:
        query = sa.select(messages.c.interaction_id).where(messages.c.message_id == message_id)

        def select(conn: sa.Connection) -> InteractionRecord | None:
            interaction_id = conn.execute(query).scalar()
            return None if interaction_id is None else _record(conn, interaction_id)

        return await self.storage.read(select)

    async def add_message(self, interaction_id: str, message_id: str, role: Role) -> None:
        values = {"message_id": message_id, "interaction_id": interaction_id, "role": role.value}
        await self.storage.write(lambda conn: insert_ignoring_duplicates(conn, messages, values))

    async def expire(self, interaction_id: str, at: float) -> None:
        statement = (
            sa.update(interactions)
            .where(interactions.c.id == interaction_id, interactions.c.expires_at > at)
            .values(expires_at=at)
        )
        await self.storage.write(lambda conn: conn.execute(statement))


def _record(conn: sa.Connection, interaction_id: str) -> InteractionRecord | None:
    row = conn.execute(sa.select(interactions).where(interactions.c.id == interaction_id)).first()
    if row is None:
        return None
    answers = sa.select(messages.c.message_id, messages.c.role).where(messages.c.interaction_id == row.id)
    return _from_row(row, {message_id: Role(role) for message_id, role in conn.execute(answers)})


def _from_row(row: sa.Row[Any], answers: dict[str, Role]) -> InteractionRecord:
    return InteractionRecord(
        id=row.id,
        application_id=row.application_id,
        token=row.token,
        channel_id=row.channel_id,
        command=row.command,
        ephemeral=bool(row.ephemeral),
        deferred=bool(row.deferred),
        expires_at=row.expires_at,
        messages=answers,
    )


def _drop_older_than(conn: sa.Connection, horizon: float) -> None:
    """Forget up to :data:`PRUNE_BATCH` interactions whose token expired before ``horizon``, with their
    messages. Rows another transaction is pruning at the same moment are skipped (``SKIP LOCKED`` on
    PostgreSQL): two processes never wait for, or deadlock on, each other's housekeeping."""
    query = (
        sa.select(interactions.c.id)
        .where(interactions.c.expires_at < horizon)
        .limit(PRUNE_BATCH)
        .with_for_update(skip_locked=True)
    )
    old = list(conn.execute(query).scalars())
    if old:
        conn.execute(sa.delete(messages).where(messages.c.interaction_id.in_(old)))
        conn.execute(sa.delete(interactions).where(interactions.c.id.in_(old)))
