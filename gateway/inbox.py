"""The inbox: every addressed message from an authorized person, stored before it is confirmed.

``record`` is the first thing the router does with a message it will act on; the adapter confirms the
message to the platform only after that returned (adapters/base.py). The unique key
``(platform, chat_id, message_id)`` turns a platform's redelivery into a no-op, and a row stays
``pending`` until its answer is queued in the outbox (in the same transaction), so a restart answers
exactly the messages that never got one.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from adapters.base import Attachment, ChatType, InboundMessage
from agent.db import Database


class InboxState(StrEnum):
    PENDING = "pending"  # stored, not answered yet (a restart answers it)
    ANSWERED = "answered"  # the answer (or a command's reply) is in the outbox
    FAILED = "failed"  # the turn failed for good; the user was told so (the outbox has that line)
    CANCELLED = "cancelled"  # /stop or a newer message interrupted it; nothing more will be sent


@dataclass(frozen=True)
class InboxRow:
    id: int
    session_key: str
    message: InboundMessage
    state: InboxState
    stream_message_id: str | None
    received_at: float


def message_to_json(message: InboundMessage) -> str:
    return json.dumps(dataclasses.asdict(message), ensure_ascii=False, separators=(",", ":"))


def message_from_json(raw: str) -> InboundMessage:
    data: dict[str, Any] = json.loads(raw)
    data["chat_type"] = ChatType(data["chat_type"])
    data["attachments"] = tuple(Attachment(**item) for item in data.get("attachments", ()))
    return InboundMessage(**data)


class Inbox:
    """The ``inbox`` table. All writes are single ``BEGIN IMMEDIATE`` transactions."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def record(self, message: InboundMessage, session_key: str) -> InboxRow | None:
        """Store ``message``; None when it was stored before (a redelivery: do nothing more)."""

        def insert(conn: sqlite3.Connection) -> InboxRow | None:
            now = time.time()
            cursor = conn.execute(
                """INSERT OR IGNORE INTO inbox (platform, chat_id, message_id, session_key, message,
                   received_at) VALUES (?,?,?,?,?,?)""",
                (
                    message.platform,
                    message.chat_id,
                    message.message_id,
                    session_key,
                    message_to_json(message),
                    now,
                ),
            )
            if cursor.rowcount == 0:
                return None
            return InboxRow(int(cursor.lastrowid or 0), session_key, message, InboxState.PENDING, None, now)

        return await self.db.write(insert)

    async def pending(self) -> list[InboxRow]:
        """Rows without an answer, oldest first (what a restart must still answer)."""

        def select(conn: sqlite3.Connection) -> list[InboxRow]:
            rows = conn.execute("SELECT * FROM inbox WHERE state = 'pending' ORDER BY id").fetchall()
            return [_row(row) for row in rows]

        return await self.db.run(select)

    async def find(self, platform: str, chat_id: str, message_id: str) -> InboxRow | None:
        """The row of one platform message, if it was stored."""

        def select(conn: sqlite3.Connection) -> InboxRow | None:
            row = conn.execute(
                "SELECT * FROM inbox WHERE platform = ? AND chat_id = ? AND message_id = ?",
                (platform, chat_id, message_id),
            ).fetchone()
            return _row(row) if row else None

        return await self.db.run(select)

    async def set_stream_message(self, inbox_id: int, message_id: str) -> None:
        """Remember the message being edited while the answer streams, so a rerun reuses it."""
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE inbox SET stream_message_id = ? WHERE id = ?", (message_id, inbox_id)
            )
        )

    async def cancel_pending(self, platform: str, chat_ids: Collection[str]) -> int:
        """Close the pending rows of these chats without answering them (the lines of a terminal that
        has exited are not answered by the next one); returns how many."""

        def update(conn: sqlite3.Connection) -> int:
            marks = ", ".join("?" for _ in chat_ids)
            cursor = conn.execute(
                "UPDATE inbox SET state = 'cancelled', finished_at = ? "
                f"WHERE state = 'pending' AND platform = ? AND chat_id IN ({marks})",
                (time.time(), platform, *chat_ids),
            )
            return cursor.rowcount

        return await self.db.write(update) if chat_ids else 0


def finish_row(conn: sqlite3.Connection, inbox_id: int, state: InboxState) -> None:
    """Mark a row finished; for use inside a transaction that also queues its reply."""
    conn.execute(
        "UPDATE inbox SET state = ?, finished_at = ? WHERE id = ?", (state.value, time.time(), inbox_id)
    )


def _row(row: sqlite3.Row) -> InboxRow:
    return InboxRow(
        id=row["id"],
        session_key=row["session_key"],
        message=message_from_json(row["message"]),
        state=InboxState(row["state"]),
        stream_message_id=row["stream_message_id"],
        received_at=row["received_at"],
    )
