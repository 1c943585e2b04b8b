"""The agent's tables in ``state.db``: sessions, messages, per-request usage, full-text search.

Every call goes through :class:`agent.db.Database` (one thread, ``BEGIN IMMEDIATE`` writes), so the
event loop never blocks on disk and two processes never write the same message position.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.db import Database
from agent.history import SYNTHETIC_MARKS
from agent.media.types import Media
from agent.memory import OWNER_SCOPE
from agent.messages import Message, ToolCall
from agent.prompt import SystemPrompt
from agent.usage import CONVERSATION_PURPOSES, RequestUsage, Usage

# A person's message in the conversation (``agent.history.is_turn_start``: not one Herald wrote in the
# user's role, not taken out by a failed turn) after the last one a review covered; ``m`` and ``s`` are
# the messages and sessions tables.
_UNREVIEWED_TURN = "m.role = 'user' AND m.active = 1 AND m.id > s.reviewed_through AND " + " AND ".join(
    f"json_extract(m.meta, '$.{mark}') IS NULL" for mark in SYNTHETIC_MARKS
)


@dataclass(frozen=True)
class SessionRecord:
    id: str
    session_key: str
    source: str
    platform: str
    chat_id: str | None
    user_id: str | None
    title: str | None
    system_prompt: SystemPrompt
    tools_json: str
    provider: str
    model: str
    created_at: float
    updated_at: float
    message_count: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    estimated_cost: float
    uncached_cost: float
    last_prompt_tokens: int | None
    memory_scope: str = OWNER_SCOPE
    compress_failures: int = 0
    compress_retry_at: float | None = None  # wall-clock time before which no summary is attempted

    @property
    def tools(self) -> list[dict[str, Any]]:
        value: list[dict[str, Any]] = json.loads(self.tools_json)
        return value


@dataclass(frozen=True)
class NewSession:
    id: str
    session_key: str
    source: str
    platform: str
    system_prompt: SystemPrompt
    tools_json: str
    provider: str
    model: str
    chat_id: str | None = None
    user_id: str | None = None
    title: str | None = None
    memory_scope: str = OWNER_SCOPE


@dataclass(frozen=True)
class PurposeUsage:
    """The requests of one purpose ("turn", "summary", "cron", ...) added up."""

    purpose: str
    requests: int
    usage: Usage
    cost: float
    uncached_cost: float


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    session_title: str | None
    created_at: float
    role: str
    snippet: str
    active: bool


class SessionStore:
    """Sessions, messages, per-request usage and full-text search in the shared ``state.db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    async def create(cls, db: Database) -> SessionStore:
        """The store on ``db`` (migrated when it was opened)."""
        return cls(db)

    # -- sessions -----------------------------------------------------------------------------

    async def create_session(self, new: NewSession) -> SessionRecord:
        def insert(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute(
                """INSERT INTO sessions (id, session_key, source, platform, chat_id, user_id, title,
                   system_prompt, tools_json, provider, model, memory_scope, created_at, updated_at)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                (
                    new.id,
                    new.session_key,
                    new.source,
                    new.platform,
                    new.chat_id,
                    new.user_id,
                    new.title,
                    new.system_prompt.to_json(),
                    new.tools_json,
                    new.provider,
                    new.model,
                    new.memory_scope,
                    now,
                    now,
                ),
            )

        await self.db.write(insert)
        record = await self.get_session(new.id)
        assert record is not None
        return record

    async def get_session(self, session_id: str) -> SessionRecord | None:
        def select(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
            return _session_from_row(row) if row else None

        return await self.db.run(select)

    async def latest_session(self, session_key: str | None = None) -> SessionRecord | None:
        """The most recently used session, optionally of one session key."""

        def select(conn: sqlite3.Connection) -> SessionRecord | None:
            if session_key is None:
                row = conn.execute("SELECT * FROM sessions ORDER BY updated_at DESC LIMIT 1").fetchone()
            else:
                row = conn.execute(
                    "SELECT * FROM sessions WHERE session_key = ? ORDER BY updated_at DESC LIMIT 1",
                    (session_key,),
                ).fetchone()
            return _session_from_row(row) if row else None

        return await self.db.run(select)

    async def list_sessions(self, limit: int = 50) -> list[SessionRecord]:
        def select(conn: sqlite3.Connection) -> list[SessionRecord]:
            rows = conn.execute(
                "SELECT * FROM sessions ORDER BY updated_at DESC LIMIT ?", (limit,)
            ).fetchall()
            return [_session_from_row(row) for row in rows]

        return await self.db.run(select)

    async def sessions_for(self, session_key: str, limit: int = 1000) -> list[SessionRecord]:
        """The sessions of one chat, most recently used first."""

        def select(conn: sqlite3.Connection) -> list[SessionRecord]:
            rows = conn.execute(
                "SELECT * FROM sessions WHERE session_key = ? ORDER BY updated_at DESC LIMIT ?",
                (session_key, limit),
            ).fetchall()
            return [_session_from_row(row) for row in rows]

        return await self.db.run(select)

    async def set_title(self, session_id: str, title: str) -> None:
        await self.db.write(
            lambda conn: conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
        )

    async def get_todos(self, session_id: str) -> list[dict[str, Any]]:
        def select(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            row = conn.execute("SELECT todos_json FROM sessions WHERE id = ?", (session_id,)).fetchone()
            value: list[dict[str, Any]] = json.loads(row[0]) if row else []
            return value

        return await self.db.run(select)

    async def set_todos(self, session_id: str, todos: list[dict[str, Any]]) -> None:
        text = json.dumps(todos, ensure_ascii=False)
        await self.db.write(
            lambda conn: conn.execute("UPDATE sessions SET todos_json = ? WHERE id = ?", (text, session_id))
        )

    async def set_compression_state(self, session_id: str, *, failures: int, retry_at: float | None) -> None:
        """The compressor's failure count and cooldown, kept with the session across restarts."""
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE sessions SET compress_failures = ?, compress_retry_at = ? WHERE id = ?",
                (failures, retry_at, session_id),
            )
        )

    # -- messages -----------------------------------------------------------------------------

    async def append_messages(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """Append ``messages`` after the session's last one, in one transaction: all or none."""

        def insert(conn: sqlite3.Connection) -> list[Message]:
            now = time.time()
            row = conn.execute(
                "SELECT COALESCE(MAX(position), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            last = float(row[0])
            stored = [
                _insert(conn, session_id, message, last + offset, now)
                for offset, message in enumerate(messages, start=1)
            ]
            _count(conn, session_id, len(messages), now)
            return stored

        return await self.db.write(insert)

    async def rewrite_history(
        self, session_id: str, deactivate: Sequence[int], insert: Sequence[Message], reason: str
    ) -> list[Message]:
        """Compression's one sanctioned rewrite, atomically: take ``deactivate`` out of the conversation
        (kept, marked inactive with ``reason``) and add ``insert`` at their own ``position``."""

        def rewrite(conn: sqlite3.Connection) -> list[Message]:
            now = time.time()
            _deactivate(conn, deactivate, reason)
            stored = [_insert(conn, session_id, m, m.position, now) for m in insert]
            _count(conn, session_id, len(insert), now)
            return stored

        return await self.db.write(rewrite)

    async def load_messages(self, session_id: str, *, include_inactive: bool = False) -> list[Message]:
        def select(conn: sqlite3.Connection) -> list[Message]:
            query = "SELECT * FROM messages WHERE session_id = ?"
            if not include_inactive:
                query += " AND active = 1"
            rows = conn.execute(query + " ORDER BY position, id", (session_id,)).fetchall()
            files = _load_media(conn, rows)
            return [_message_from_row(row, files) for row in rows]

        return await self.db.run(select)

    async def deactivate_messages(self, message_ids: Sequence[int], reason: str) -> None:
        """Take messages out of the conversation while keeping them for search and audit."""
        await self.db.write(lambda conn: _deactivate(conn, message_ids, reason))

    # -- usage --------------------------------------------------------------------------------

    async def record_request(
        self, session_id: str, request: RequestUsage, *, at: float | None = None
    ) -> None:
        """Store one provider request's usage and add it to the session's totals."""

        def insert(conn: sqlite3.Connection) -> None:
            now = time.time() if at is None else at
            u = request.usage
            conn.execute(
                """INSERT INTO requests (session_id, purpose, provider, model, input_tokens,
                   output_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
                   estimated_cost, uncached_cost, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""",
                (
                    session_id,
                    request.purpose,
                    request.provider,
                    request.model,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_tokens,
                    u.cache_write_5m_tokens,
                    u.cache_write_1h_tokens,
                    request.cost,
                    request.uncached_cost,
                    now,
                ),
            )
            track_prompt = request.purpose in CONVERSATION_PURPOSES
            conn.execute(
                """UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
                   cache_read_tokens = cache_read_tokens + ?, cache_write_tokens = cache_write_tokens + ?,
                   estimated_cost = estimated_cost + ?, uncached_cost = uncached_cost + ?,
                   last_prompt_tokens = CASE WHEN ? THEN ? ELSE last_prompt_tokens END,
                   updated_at = ? WHERE id = ?""",
                (
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_tokens,
                    u.cache_write_tokens,
                    request.cost,
                    request.uncached_cost,
                    track_prompt,
                    u.prompt_tokens,
                    now,
                    session_id,
                ),
            )

        await self.db.write(insert)

    async def request_times(self, session_id: str, since: float) -> list[float]:
        """Timestamps of the session's conversation requests since ``since``, oldest first (TTL pacing)."""

        def select(conn: sqlite3.Connection) -> list[float]:
            rows = conn.execute(
                f"""SELECT created_at FROM requests WHERE session_id = ?
                   AND purpose IN ({", ".join("?" for _ in CONVERSATION_PURPOSES)})
                   AND created_at >= ? ORDER BY id""",
                (session_id, *CONVERSATION_PURPOSES, since),
            ).fetchall()
            return [float(row[0]) for row in rows]

        return await self.db.run(select)

    async def turns_since_review(self, session_id: str) -> int:
        """User turns of the session that no background review has covered yet."""

        def count(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                f"""SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id
                    WHERE m.session_id = ? AND {_UNREVIEWED_TURN}""",
                (session_id,),
            ).fetchone()
            return int(row[0])

        return await self.db.run(count)

    async def idle_unreviewed(self, idle_since: float, active_after: float) -> list[SessionRecord]:
        """Sessions last used between ``active_after`` and ``idle_since`` with turns not yet reviewed."""

        def select(conn: sqlite3.Connection) -> list[SessionRecord]:
            rows = conn.execute(
                f"""SELECT s.* FROM sessions s WHERE s.updated_at < ? AND s.updated_at > ?
                    AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id AND {_UNREVIEWED_TURN})
                    ORDER BY s.updated_at""",
                (idle_since, active_after),
            ).fetchall()
            return [_session_from_row(row) for row in rows]

        return await self.db.run(select)

    async def mark_reviewed(self, session_id: str, through_message_id: int) -> None:
        """A review covered the session up to ``through_message_id``."""
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE sessions SET reviewed_through = MAX(reviewed_through, ?) WHERE id = ?",
                (through_message_id, session_id),
            )
        )

    async def usage_by_purpose(self, session_key: str | None = None) -> list[PurposeUsage]:
        """Requests summed per purpose (of one chat's sessions, or all), the most expensive first."""

        def select(conn: sqlite3.Connection) -> list[PurposeUsage]:
            rows = conn.execute(
                """SELECT r.purpose, COUNT(*) AS requests, SUM(r.input_tokens) AS input_tokens,
                          SUM(r.output_tokens) AS output_tokens, SUM(r.cache_read_tokens) AS cache_read,
                          SUM(r.cache_write_5m_tokens) AS write_5m, SUM(r.cache_write_1h_tokens) AS write_1h,
                          SUM(r.estimated_cost) AS cost, SUM(r.uncached_cost) AS uncached_cost
                   FROM requests r JOIN sessions s ON s.id = r.session_id
                   WHERE ? IS NULL OR s.session_key = ?
                   GROUP BY r.purpose ORDER BY cost DESC, r.purpose""",
                (session_key, session_key),
            ).fetchall()
            return [
                PurposeUsage(
                    purpose=row["purpose"],
                    requests=row["requests"],
                    usage=Usage(
                        input_tokens=row["input_tokens"],
                        output_tokens=row["output_tokens"],
                        cache_read_tokens=row["cache_read"],
                        cache_write_5m_tokens=row["write_5m"],
                        cache_write_1h_tokens=row["write_1h"],
                    ),
                    cost=row["cost"],
                    uncached_cost=row["uncached_cost"],
                )
                for row in rows
            ]

        return await self.db.run(select)

    async def set_last_prompt_tokens(self, session_id: str, tokens: int | None) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                "UPDATE sessions SET last_prompt_tokens = ? WHERE id = ?", (tokens, session_id)
            )
        )

    # -- search -------------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        limit: int = 10,
        *,
        session_key: str | None = None,
        current_session: str | None = None,
    ) -> list[SearchHit]:
        """Full-text search over every message ever stored, active or compressed away.

        ``session_key`` limits it to the sessions of one chat: one chat must never see another's.
        ``current_session``'s active messages are left out: they are in the model's context already.
        """

        def select(conn: sqlite3.Connection) -> list[SearchHit]:
            rows = conn.execute(
                """SELECT m.session_id, s.title, m.created_at, m.role, m.active,
                          snippet(messages_fts, 0, '[', ']', '…', 24) AS snippet
                   FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                   JOIN sessions s ON s.id = m.session_id
                   WHERE messages_fts MATCH ? AND (? IS NULL OR s.session_key = ?)
                   AND NOT (m.session_id IS ? AND m.active = 1)
                   ORDER BY rank LIMIT ?""",
                (fts_query(query), session_key, session_key, current_session, limit),
            ).fetchall()
            return [
                SearchHit(
                    session_id=row["session_id"],
                    session_title=row["title"],
                    created_at=row["created_at"],
                    role=row["role"],
                    snippet=row["snippet"],
                    active=bool(row["active"]),
                )
                for row in rows
            ]

        return await self.db.run(select)


@asynccontextmanager
async def open_session_store(path: Path) -> AsyncIterator[SessionStore]:
    """``state.db`` at ``path`` with the agent's tables, closed on exit (tools and tests)."""
    async with await Database.open(path) as db:
        yield await SessionStore.create(db)


def _insert(
    conn: sqlite3.Connection, session_id: str, message: Message, position: float, now: float
) -> Message:
    for media in message.media:  # each file once, whichever message carries it again
        conn.execute(
            "INSERT OR IGNORE INTO media (sha256, media_type, size, data, created_at) VALUES (?,?,?,?,?)",
            (media.sha256, media.media_type, len(media.data), media.data, now),
        )
    refs = json.dumps([m.ref() for m in message.media], ensure_ascii=False) if message.media else None
    cursor = conn.execute(
        """INSERT INTO messages (session_id, position, role, content, tool_calls, tool_call_id,
           tool_name, is_error, payload, payload_api, active, meta, created_at, media)
           VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
        (
            session_id,
            position,
            message.role,
            message.content,
            _tool_calls_json(message.tool_calls),
            message.tool_call_id,
            message.tool_name,
            int(message.is_error),
            _json_or_none(message.payload),
            message.payload_api,
            int(message.active),
            json.dumps(message.meta, ensure_ascii=False),
            now,
            refs,
        ),
    )
    return replace(message, id=int(cursor.lastrowid or 0), position=position, created_at=now)


def _load_media(conn: sqlite3.Connection, rows: Sequence[sqlite3.Row]) -> dict[str, bytes]:
    """The bytes of every file the message ``rows`` carry, by SHA-256 (one query)."""
    wanted = {ref["sha256"] for row in rows if row["media"] for ref in json.loads(row["media"])}
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    found = conn.execute(f"SELECT sha256, data FROM media WHERE sha256 IN ({marks})", tuple(wanted))
    return {sha: bytes(data) for sha, data in found.fetchall()}


def _count(conn: sqlite3.Connection, session_id: str, added: int, now: float) -> None:
    conn.execute(
        "UPDATE sessions SET message_count = message_count + ?, updated_at = ? WHERE id = ?",
        (added, now, session_id),
    )


def _deactivate(conn: sqlite3.Connection, message_ids: Sequence[int], reason: str) -> None:
    conn.executemany(
        "UPDATE messages SET active = 0, meta = json_set(meta, '$.inactive_reason', ?) WHERE id = ?",
        [(reason, message_id) for message_id in message_ids],
    )


def fts_query(text: str) -> str:
    """Quote each word so user text is never parsed as FTS5 syntax (``AND``, ``*``, ``:`` ...)."""
    words = [word.replace('"', '""') for word in text.split() if word.strip()]
    return " ".join(f'"{word}"' for word in words) or '""'


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tool_calls_json(calls: tuple[ToolCall, ...]) -> str | None:
    if not calls:
        return None
    return json.dumps(
        [{"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in calls], ensure_ascii=False
    )


def _message_from_row(row: sqlite3.Row, files: dict[str, bytes]) -> Message:
    refs = json.loads(row["media"]) if row["media"] else []
    calls = tuple(
        ToolCall(id=c["id"], name=c["name"], arguments_json=c["arguments"])
        for c in json.loads(row["tool_calls"] or "[]")
    )
    return Message(
        role=row["role"],
        content=row["content"],
        tool_calls=calls,
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool_name"],
        is_error=bool(row["is_error"]),
        payload=json.loads(row["payload"]) if row["payload"] else None,
        payload_api=row["payload_api"],
        id=row["id"],
        position=row["position"],
        active=bool(row["active"]),
        created_at=row["created_at"],
        meta=json.loads(row["meta"] or "{}"),
        media=tuple(Media.from_ref(ref, files[ref["sha256"]]) for ref in refs if ref["sha256"] in files),
    )


def _session_from_row(row: sqlite3.Row) -> SessionRecord:
    return SessionRecord(
        id=row["id"],
        session_key=row["session_key"],
        source=row["source"],
        platform=row["platform"],
        chat_id=row["chat_id"],
        user_id=row["user_id"],
        title=row["title"],
        system_prompt=SystemPrompt.from_json(row["system_prompt"]),
        tools_json=row["tools_json"],
        provider=row["provider"],
        model=row["model"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        message_count=row["message_count"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cache_read_tokens=row["cache_read_tokens"],
        cache_write_tokens=row["cache_write_tokens"],
        estimated_cost=row["estimated_cost"],
        uncached_cost=row["uncached_cost"],
        last_prompt_tokens=row["last_prompt_tokens"],
        memory_scope=row["memory_scope"],
        compress_failures=row["compress_failures"],
        compress_retry_at=row["compress_retry_at"],
    )
