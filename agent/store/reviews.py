"""The background review's schedule: which sessions have turns no review has covered yet.

A review reads a session's recent turns and updates memory and skills; ``sessions.reviewed_through``
is the id of the last message a review covered. A turn counts when a person sent it
(:func:`agent.history.is_turn_start`: not a message Herald wrote in the user's role, not one taken out
by a failed turn) after that message, and Herald answered it here: the turns of a history a client
brought along (``IMPORTED_MARK``: a client of the OpenAI-compatible API) were answered elsewhere, and
twenty of them do not make twenty turns to review at once.

Contract: reads see every write that returned before them. :meth:`ReviewSchedule.mark_reviewed` only
moves ``reviewed_through`` forward, in one statement: idempotent, safe to retry, and a late review that
covered less never undoes a later one.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import messages, sessions
from agent.db.sql import json_text
from agent.history import IMPORTED_MARK, SYNTHETIC_MARKS
from agent.store.sessions import RECORD_COLUMNS, SessionRecord, session_record

_UNREVIEWED_TURN = (
    messages.c.session_id == sessions.c.id,
    messages.c.role == "user",
    messages.c.active == sa.true(),
    messages.c.id > sessions.c.reviewed_through,
    *(json_text(messages.c.meta, mark).is_(None) for mark in (*SYNTHETIC_MARKS, IMPORTED_MARK)),
)
_TURNS_SINCE_REVIEW = sa.select(sa.func.count()).where(
    messages.c.session_id == sa.bindparam("session_id"), *_UNREVIEWED_TURN
)
_IDLE_UNREVIEWED = (
    sa.select(*RECORD_COLUMNS)
    .where(
        sessions.c.updated_at < sa.bindparam("idle_since"),
        sessions.c.updated_at > sa.bindparam("active_after"),
        sa.exists().where(*_UNREVIEWED_TURN),
    )
    .order_by(sessions.c.updated_at)
)
_THROUGH = sa.bindparam("through", type_=sessions.c.reviewed_through.type)
_MARK_REVIEWED = (
    sa.update(sessions)
    .where(sessions.c.id == sa.bindparam("session_id"), sessions.c.reviewed_through < _THROUGH)
    .values(reviewed_through=_THROUGH)
)


class ReviewSchedule:
    """``sessions.reviewed_through`` against the sessions' messages."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def turns_since_review(self, session_id: str) -> int:
        """User turns of the session that no background review has covered yet."""
        parameters = {"session_id": session_id}
        return await self.storage.read(
            lambda conn: conn.execute(_TURNS_SINCE_REVIEW, parameters).scalar_one()
        )

    async def idle_unreviewed(self, idle_since: float, active_after: float) -> list[SessionRecord]:
        """Sessions last used between ``active_after`` and ``idle_since`` with turns not yet reviewed,
        the longest idle first."""
        parameters: dict[str, Any] = {"idle_since": idle_since, "active_after": active_after}
        rows = await self.storage.read(lambda conn: conn.execute(_IDLE_UNREVIEWED, parameters).all())
        return [session_record(row) for row in rows]

    async def mark_reviewed(self, session_id: str, through_message_id: int) -> None:
        """A review covered the session up to ``through_message_id``."""
        parameters = {"session_id": session_id, "through": through_message_id}
        await self.storage.write(lambda conn: conn.execute(_MARK_REVIEWED, parameters))
