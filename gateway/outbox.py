"""The outbox: every reply is recorded before it is sent and marked sent after.

A reply is queued in the same transaction that marks its inbox row answered, so after a crash either
the message is still pending (and is answered again) or its reply is queued (and is sent): never
neither. The sender (``gateway.sender``) marks a row sent together with the platform's message id.
The one window where a reply can go out twice is between the platform accepting a send and that
single ``UPDATE``; a crash exactly there resends it after the restart.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum

from adapters.base import ChatAddress, OutboundText, TextEntity
from agent.db import Database
from gateway.inbox import InboxState, finish_row

# What a process delivers: platform -> its only chat, or None for every chat of the platform.
Served = Mapping[str, str | None]


class Operation(StrEnum):
    SEND = "send"
    EDIT = "edit"  # replace the text of ``target_message_id`` (a message streamed during the turn)
    DELETE = "delete"  # remove ``target_message_id`` (a streamed message the final answer no longer needs)


class OutboxState(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"  # given up: counted in gateway_delivery_failures_total and logged


@dataclass(frozen=True)
class Outgoing:
    """One operation to queue."""

    address: ChatAddress
    operation: Operation
    text: OutboundText
    reply_to: str | None = None
    target_message_id: str | None = None


@dataclass(frozen=True)
class OutboxItem:
    id: int
    inbox_id: int | None
    outgoing: Outgoing
    state: OutboxState
    attempts: int
    next_attempt_at: float
    platform_message_id: str | None
    error: str | None


class Outbox:
    """The ``outbox`` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def enqueue(
        self,
        items: Sequence[Outgoing],
        *,
        inbox_id: int | None = None,
        finish: InboxState | None = None,
    ) -> list[int]:
        """Queue ``items`` in order; when ``finish`` is given, close ``inbox_id`` in the same transaction."""

        def insert(conn: sqlite3.Connection) -> list[int]:
            ids = [_insert(conn, item, inbox_id) for item in items]
            if finish is not None and inbox_id is not None:
                finish_row(conn, inbox_id, finish)
            return ids

        return await self.db.write(insert)

    async def due_heads(self, now: float, served: Served) -> list[OutboxItem]:
        """The oldest pending item of each chat ``served``, if it is due (a chat's replies go out in
        order). Only this process's chats: another process may serve the others."""

        def select(conn: sqlite3.Connection) -> list[OutboxItem]:
            where, params = _served_sql(served)
            rows = conn.execute(
                f"""SELECT o.* FROM outbox o JOIN (
                       SELECT MIN(id) AS id FROM outbox
                       WHERE state = 'pending' AND ({where})
                       GROUP BY platform, chat_id
                   ) head ON o.id = head.id
                   WHERE o.next_attempt_at <= ? ORDER BY o.id""",
                (*params, now),
            ).fetchall()
            return [_item(row) for row in rows]

        return await self.db.run(select)

    async def next_attempt_at(self, served: Served) -> float | None:
        """When the earliest pending item of the chats ``served`` becomes due (None: nothing pending)."""

        def select(conn: sqlite3.Connection) -> float | None:
            where, params = _served_sql(served)
            row = conn.execute(
                f"SELECT MIN(next_attempt_at) FROM outbox WHERE state = 'pending' AND ({where})", params
            ).fetchone()
            return None if row[0] is None else float(row[0])

        return await self.db.run(select)

    async def pending_count(self, served: Served | None = None) -> int:
        """Pending items (of the chats ``served``, or all)."""

        def select(conn: sqlite3.Connection) -> int:
            if served is None:
                row = conn.execute("SELECT COUNT(*) FROM outbox WHERE state = 'pending'").fetchone()
            else:
                where, params = _served_sql(served)
                row = conn.execute(
                    f"SELECT COUNT(*) FROM outbox WHERE state = 'pending' AND ({where})", params
                ).fetchone()
            return int(row[0])

        return await self.db.run(select)

    async def mark_sent(self, item_id: int, platform_message_id: str) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE outbox SET state = 'sent', platform_message_id = ?, sent_at = ?, "
                "attempts = attempts + 1 WHERE id = ?",
                (platform_message_id, time.time(), item_id),
            )
        )

    async def reschedule(self, item_id: int, error: str, at: float) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE outbox SET attempts = attempts + 1, error = ?, next_attempt_at = ? WHERE id = ?",
                (error, at, item_id),
            )
        )

    async def postpone(self, item_id: int, at: float) -> None:
        """Try ``item_id`` again at ``at`` without counting an attempt (its chat is paused)."""
        await self.db.write(
            lambda conn: conn.execute("UPDATE outbox SET next_attempt_at = ? WHERE id = ?", (at, item_id))
        )

    async def mark_failed(self, item_id: int, error: str) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE outbox SET state = 'failed', attempts = attempts + 1, error = ? WHERE id = ?",
                (error, item_id),
            )
        )

    async def replace(self, item_id: int, outgoing: Outgoing) -> None:
        """Change what a pending item does (plain text after a formatting refusal; a send for a lost edit)."""

        def update(conn: sqlite3.Connection) -> None:
            conn.execute(
                """UPDATE outbox SET operation = ?, target_message_id = ?, text = ?, entities = ?
                   WHERE id = ?""",
                (
                    outgoing.operation.value,
                    outgoing.target_message_id,
                    outgoing.text.text,
                    _entities_json(outgoing.text.entities),
                    item_id,
                ),
            )

        await self.db.write(update)

    async def items_for(self, inbox_id: int) -> list[OutboxItem]:
        def select(conn: sqlite3.Connection) -> list[OutboxItem]:
            rows = conn.execute("SELECT * FROM outbox WHERE inbox_id = ? ORDER BY id", (inbox_id,)).fetchall()
            return [_item(row) for row in rows]

        return await self.db.run(select)


def _served_sql(served: Served) -> tuple[str, tuple[str, ...]]:
    """A ``WHERE`` clause matching the chats ``served`` (nothing when empty), with its parameters."""
    clauses: list[str] = []
    params: list[str] = []
    for platform, chat_id in sorted(served.items()):
        if chat_id is None:
            clauses.append("platform = ?")
            params.append(platform)
        else:
            clauses.append("(platform = ? AND chat_id = ?)")
            params.extend((platform, chat_id))
    return " OR ".join(clauses) or "0", tuple(params)


def _entities_json(entities: Sequence[TextEntity]) -> str:
    return json.dumps([asdict(entity) for entity in entities], ensure_ascii=False, separators=(",", ":"))


def _insert(conn: sqlite3.Connection, item: Outgoing, inbox_id: int | None) -> int:
    now = time.time()
    cursor = conn.execute(
        """INSERT INTO outbox (inbox_id, platform, chat_id, thread_id, reply_to, operation,
           target_message_id, text, entities, next_attempt_at, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)""",
        (
            inbox_id,
            item.address.platform,
            item.address.chat_id,
            item.address.thread_id,
            item.reply_to,
            item.operation.value,
            item.target_message_id,
            item.text.text,
            _entities_json(item.text.entities),
            now,
            now,
        ),
    )
    return int(cursor.lastrowid or 0)


def _item(row: sqlite3.Row) -> OutboxItem:
    entities = tuple(TextEntity(**entity) for entity in json.loads(row["entities"]))
    return OutboxItem(
        id=row["id"],
        inbox_id=row["inbox_id"],
        outgoing=Outgoing(
            address=ChatAddress(row["platform"], row["chat_id"], row["thread_id"]),
            operation=Operation(row["operation"]),
            text=OutboundText(row["text"], entities),
            reply_to=row["reply_to"],
            target_message_id=row["target_message_id"],
        ),
        state=OutboxState(row["state"]),
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        platform_message_id=row["platform_message_id"],
        error=row["error"],
    )
