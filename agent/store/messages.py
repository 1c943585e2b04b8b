"""A session's messages in order, with the files they carry, and full-text search over all of them.

Contract:

- :meth:`Messages.append` stores messages after the session's last one, in one transaction: all of
  them or none, each returned with its new ``id``, ``position`` and ``created_at``. Two writers of one
  session never get the same position: the session row is updated first (its message count), which on
  PostgreSQL locks the row until commit, so a second writer reads ``MAX(position)`` only after the
  first committed; on SQLite the write transaction holds the database's write lock. (The session's
  lease keeps two writers apart anyway; this holds without it.) Not idempotent: retry only an append
  that raised :class:`~agent.db.errors.StorageUnavailable` (nothing was stored).
- :meth:`Messages.rewrite` is compression's one sanctioned rewrite, atomically: take messages out of
  the conversation and insert their replacements at positions the caller chose.
- :meth:`Messages.deactivate` is idempotent: a message taken out stays in the database, searchable,
  with the reason in its ``meta``.
- Files (:mod:`agent.store.media`) are stored with the message that carries them, once per content.
- Messages are never edited otherwise: what was sent is stored as sent (cache invariant 3).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import messages, sessions
from agent.db.search import text_match
from agent.media.budget import MediaLoad
from agent.model.messages import Message, ToolCall
from agent.store.media import attached, load_files, load_of, references, store_files
from agent.store.sessions import UPDATE_SESSION


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    session_title: str | None
    created_at: float
    role: str
    snippet: str
    active: bool


_INSERT_ONE = sa.insert(messages).returning(messages.c.id)
_INSERT_MANY = sa.insert(messages).returning(messages.c.id, sort_by_parameter_order=True)
_LAST_POSITION = sa.select(sa.func.coalesce(sa.func.max(messages.c.position), 0.0)).where(
    messages.c.session_id == sa.bindparam("session_id")
)
_COUNT_ADDED = UPDATE_SESSION.values(
    message_count=sessions.c.message_count + sa.bindparam("added", type_=sa.Integer),
    updated_at=sa.bindparam("now", type_=sa.Double),
)
_COLUMNS = (  # in the order _message unpacks them
    messages.c.id,
    messages.c.position,
    messages.c.role,
    messages.c.content,
    messages.c.tool_calls,
    messages.c.tool_call_id,
    messages.c.tool_name,
    messages.c.is_error,
    messages.c.payload,
    messages.c.payload_api,
    messages.c.active,
    messages.c.meta,
    messages.c.created_at,
    messages.c.media,
)
_ALL = (
    sa.select(*_COLUMNS)
    .where(messages.c.session_id == sa.bindparam("session_id"))
    .order_by(messages.c.position, messages.c.id)
)
_ACTIVE = _ALL.where(messages.c.active == sa.true())
_ACTIVE_MEDIA = sa.select(messages.c.media).where(
    messages.c.session_id == sa.bindparam("session_id"),
    messages.c.active == sa.true(),
    messages.c.media.is_not(None),
)
_METAS = (
    sa.select(messages.c.id, messages.c.meta)
    .where(messages.c.id.in_(sa.bindparam("ids", expanding=True)))
    .with_for_update()
)
_DEACTIVATE = (
    sa.update(messages)
    .where(messages.c.id == sa.bindparam("message_id"))
    .values(active=False, meta=sa.bindparam("new_meta"))
)


class Messages:
    """The ``messages`` table (and ``media``, through :mod:`agent.store.media`)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def append(self, session_id: str, new: Sequence[Message]) -> list[Message]:
        """Append ``new`` after the session's last message: all or none."""

        def insert(conn: sa.Connection) -> list[Message]:
            now = time.time()
            _count_added(conn, session_id, len(new), now)  # first: it locks the session row
            last = float(conn.execute(_LAST_POSITION, {"session_id": session_id}).scalar_one())
            placed = [(message, last + offset) for offset, message in enumerate(new, start=1)]
            return _insert(conn, session_id, placed, now)

        return await self.storage.write(insert)

    async def rewrite(
        self, session_id: str, deactivate: Sequence[int], insert: Sequence[Message], reason: str
    ) -> list[Message]:
        """Take ``deactivate`` out of the conversation (kept, marked inactive with ``reason``) and add
        ``insert`` at their own ``position``, atomically."""

        def rewrite(conn: sa.Connection) -> list[Message]:
            now = time.time()
            _count_added(conn, session_id, len(insert), now)
            _deactivate(conn, deactivate, reason)
            return _insert(conn, session_id, [(message, message.position) for message in insert], now)

        return await self.storage.write(rewrite)

    async def load(self, session_id: str, *, include_inactive: bool = False) -> list[Message]:
        """The session's messages in conversation order (by position), with their files."""

        def select(conn: sa.Connection) -> list[Message]:
            rows = conn.execute(_ALL if include_inactive else _ACTIVE, {"session_id": session_id}).all()
            files = load_files(conn, (row.media for row in rows))
            return [_message(row, files) for row in rows]

        return await self.storage.read(select)

    async def media_load(self, session_id: str) -> MediaLoad:
        """What the files of the session's active messages add to every request (their references
        only: no file is read)."""

        def select(conn: sa.Connection) -> MediaLoad:
            return load_of(conn.execute(_ACTIVE_MEDIA, {"session_id": session_id}).scalars())

        return await self.storage.read(select)

    async def deactivate(self, message_ids: Sequence[int], reason: str) -> None:
        """Take messages out of the conversation while keeping them for search and audit."""
        await self.storage.write(lambda conn: _deactivate(conn, message_ids, reason))

    async def search(
        self,
        query: str,
        limit: int = 10,
        *,
        session_key: str | None = None,
        current_session: str | None = None,
    ) -> list[SearchHit]:
        """Every message ever stored with all the words of ``query``, active or compressed away, the
        best match first.

        ``session_key`` limits it to the sessions of one chat: one chat must never see another's.
        ``current_session``'s active messages are left out: they are in the model's context already.
        """

        def select(conn: sa.Connection) -> list[SearchHit]:
            dialect = conn.dialect.name
            match = text_match(dialect)
            parameters = {
                "words": match.words(query),
                "session_key": session_key,
                "current_session": current_session,
                "limit": limit,
            }
            rows = conn.execute(_search_statement(dialect), parameters)
            return [
                SearchHit(session_id, title, created_at, role, match.finish(snippet, content), active)
                for session_id, title, created_at, role, snippet, content, active in rows
            ]

        return await self.storage.read(select)


@functools.cache
def _search_statement(dialect: str) -> sa.Select[Any]:
    """:meth:`Messages.search` for ``dialect``, built once: every choice is a parameter."""
    match = text_match(dialect)
    session_key = sa.bindparam("session_key", type_=sa.Text)
    current_session = sa.bindparam("current_session", type_=sa.Text)
    in_context = sa.and_(
        messages.c.session_id.is_not_distinct_from(current_session), messages.c.active == sa.true()
    )
    return (
        sa.select(  # SearchHit's first four, then what its snippet is made of
            messages.c.session_id,
            sessions.c.title,
            messages.c.created_at,
            messages.c.role,
            match.snippet,
            messages.c.content,
            messages.c.active,
        )
        .select_from(match.source.join(sessions, sessions.c.id == messages.c.session_id))
        .where(
            match.condition,
            sa.or_(session_key.is_(None), sessions.c.session_key == session_key),
            sa.not_(in_context),
        )
        .order_by(match.best_first)
        .limit(sa.bindparam("limit", type_=sa.Integer))
    )


def _count_added(conn: sa.Connection, session_id: str, added: int, now: float) -> None:
    conn.execute(_COUNT_ADDED, {"session_id": session_id, "added": added, "now": now})


def _insert(
    conn: sa.Connection, session_id: str, placed: Sequence[tuple[Message, float]], now: float
) -> list[Message]:
    """Insert each message at its position (its files first); the messages as stored, with their ids."""
    if not placed:
        return []
    store_files(conn, (file for message, _ in placed for file in message.media), now)
    rows = [_row(session_id, message, position, now) for message, position in placed]
    if len(rows) == 1:  # the usual case: the batch form costs more for one row
        ids = [conn.execute(_INSERT_ONE, rows[0]).scalar_one()]
    else:
        ids = list(conn.execute(_INSERT_MANY, rows).scalars())
    return [
        replace(message, id=int(message_id), position=position, created_at=now)
        for (message, position), message_id in zip(placed, ids, strict=True)
    ]


def _deactivate(conn: sa.Connection, message_ids: Sequence[int], reason: str) -> None:
    """Mark messages inactive, their ``meta`` saying why (read and rewritten here: one JSON for both
    databases; the rows are locked on PostgreSQL while this transaction runs)."""
    if not message_ids:
        return
    found = conn.execute(_METAS, {"ids": list(message_ids)}).all()
    updates = [
        {"message_id": row.id, "new_meta": _json({**json.loads(row.meta or "{}"), "inactive_reason": reason})}
        for row in found
    ]
    if updates:
        conn.execute(_DEACTIVATE, updates)


def _row(session_id: str, message: Message, position: float, now: float) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "position": position,
        "role": message.role,
        "content": message.content,
        "tool_calls": _tool_calls_json(message.tool_calls),
        "tool_call_id": message.tool_call_id,
        "tool_name": message.tool_name,
        "is_error": message.is_error,
        "payload": None if message.payload is None else _json(message.payload, compact=True),
        "payload_api": message.payload_api,
        "active": message.active,
        "meta": _json(message.meta),
        "created_at": now,
        "media": references(message.media),
    }


def _message(row: Sequence[Any], files: dict[str, bytes]) -> Message:
    """A row of ``_COLUMNS`` as a message (unpacked by position: this runs for every message loaded)."""
    (
        message_id,
        position,
        role,
        content,
        tool_calls,
        tool_call_id,
        tool_name,
        is_error,
        payload,
        payload_api,
        active,
        meta,
        created_at,
        media_references,
    ) = row
    calls = (
        tuple(
            ToolCall(id=c["id"], name=c["name"], arguments_json=c["arguments"])
            for c in json.loads(tool_calls)
        )
        if tool_calls
        else ()
    )
    return Message(
        role=role,
        content=content,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        is_error=bool(is_error),
        payload=json.loads(payload) if payload else None,
        payload_api=payload_api,
        id=message_id,
        position=position,
        active=bool(active),
        created_at=created_at,
        meta=json.loads(meta) if meta else {},
        media=attached(media_references, files),
    )


def _json(value: Any, *, compact: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)


def _tool_calls_json(calls: tuple[ToolCall, ...]) -> str | None:
    if not calls:
        return None
    return _json([{"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in calls])
