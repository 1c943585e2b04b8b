"""Sessions: one row per conversation, with the prompt bytes and tool list every request of it re-sends.

Contract:

- :meth:`Sessions.create` inserts a session and returns it as stored, in one transaction. Session ids
  are new (uuids), so a second create with the same id is a bug and fails (``IntegrityError``).
- The setters (title, todos, compression state) each update one column group of one row in one
  statement: atomic and idempotent (the last write wins), so a caller may retry any of them. Setting
  something on a session that does not exist changes nothing.
- Reads see every write that returned before them.

The prompt bytes (``system_prompt``, ``tools_json``) are written once, by :meth:`Sessions.create`, and
never updated: nothing here can change what a session sends (cache invariant 1).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import SESSION_TOTALS, sessions
from agent.memory import OWNER_SCOPE
from agent.prompt import SystemPrompt


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
class SessionTotals:
    """What a session used and cost (as :class:`SessionRecord` has it), without the rest of its row:
    what a total over every session of a home reads (its prompt and tools are the row's bulk)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    estimated_cost: float
    uncached_cost: float


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


RECORD_COLUMNS = tuple(sessions.c[field.name] for field in fields(SessionRecord))
_INSERT = sa.insert(sessions).returning(*RECORD_COLUMNS)
_BY_ID = sa.select(*RECORD_COLUMNS).where(sessions.c.id == sa.bindparam("session_id"))
_RECENT = sa.select(*RECORD_COLUMNS).order_by(sessions.c.updated_at.desc()).limit(sa.bindparam("limit"))
_TOTALS = sa.select(*(sessions.c[name] for name in SESSION_TOTALS)).order_by(sessions.c.updated_at.desc())
_TOTALS_OF_KEY = _TOTALS.where(sessions.c.session_key == sa.bindparam("session_key"))
_RECENT_OF_KEY = _RECENT.where(sessions.c.session_key == sa.bindparam("session_key"))
# A direct chat's sessions carry the person's id (gateway.conversation.addressing).
_DIRECT_OF_USER = _RECENT.where(
    sessions.c.platform == sa.bindparam("platform"),
    sessions.c.user_id == sa.bindparam("user_id"),
    sessions.c.session_key.startswith(sa.bindparam("dm_prefix")),  # platform names are letters
)
_TODOS = sa.select(sessions.c.todos_json).where(sessions.c.id == sa.bindparam("session_id"))
# Parameters named after columns are what it sets (``session_id`` is not a column of ``sessions``).
UPDATE_SESSION = sa.update(sessions).where(sessions.c.id == sa.bindparam("session_id"))


class Sessions:
    """The ``sessions`` table."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def create(self, new: NewSession) -> SessionRecord:
        now = time.time()
        values = {
            "id": new.id,
            "session_key": new.session_key,
            "source": new.source,
            "platform": new.platform,
            "chat_id": new.chat_id,
            "user_id": new.user_id,
            "title": new.title,
            "system_prompt": new.system_prompt.to_json(),
            "tools_json": new.tools_json,
            "provider": new.provider,
            "model": new.model,
            "memory_scope": new.memory_scope,
            "created_at": now,
            "updated_at": now,
        }
        return await self.storage.write(lambda conn: session_record(conn.execute(_INSERT, values).one()))

    async def get(self, session_id: str) -> SessionRecord | None:
        def select(conn: sa.Connection) -> SessionRecord | None:
            row = conn.execute(_BY_ID, {"session_id": session_id}).first()
            return session_record(row) if row else None

        return await self.storage.read(select)

    async def latest(self, session_key: str | None = None) -> SessionRecord | None:
        """The most recently used session, optionally of one session key."""
        found = await (self.recent(1) if session_key is None else self.of_key(session_key, 1))
        return found[0] if found else None

    async def recent(self, limit: int = 50) -> list[SessionRecord]:
        """Sessions, most recently used first."""
        return await self._select(_RECENT, {"limit": limit})

    async def totals(self, session_key: str | None = None) -> list[SessionTotals]:
        """Every session's totals (of one chat, or all), most recently used first (in :meth:`recent`'s
        order)."""
        if session_key is None:
            statement, parameters = _TOTALS, {}
        else:
            statement, parameters = _TOTALS_OF_KEY, {"session_key": session_key}
        rows = await self.storage.read(lambda conn: conn.execute(statement, parameters).all())
        return [SessionTotals(**row._asdict()) for row in rows]

    async def of_key(self, session_key: str, limit: int = 1000) -> list[SessionRecord]:
        """The sessions of one chat, most recently used first."""
        return await self._select(_RECENT_OF_KEY, {"session_key": session_key, "limit": limit})

    async def direct_with(self, platform: str, user_id: str) -> SessionRecord | None:
        """The latest session of the person's direct chat with the bot on ``platform`` (None: they never
        wrote to it directly)."""
        parameters = {"platform": platform, "user_id": user_id, "dm_prefix": f"{platform}:dm:", "limit": 1}
        found = await self._select(_DIRECT_OF_USER, parameters)
        return found[0] if found else None

    async def set_title(self, session_id: str, title: str) -> None:
        await self._update(session_id, title=title)

    async def todos(self, session_id: str) -> list[dict[str, Any]]:
        text = await self.storage.read(lambda conn: conn.execute(_TODOS, {"session_id": session_id}).scalar())
        value: list[dict[str, Any]] = json.loads(text) if text else []
        return value

    async def set_todos(self, session_id: str, todos: list[dict[str, Any]]) -> None:
        await self._update(session_id, todos_json=json.dumps(todos, ensure_ascii=False))

    async def set_compression_state(self, session_id: str, *, failures: int, retry_at: float | None) -> None:
        """The compressor's failure count and cooldown, kept with the session across restarts."""
        await self._update(session_id, compress_failures=failures, compress_retry_at=retry_at)

    async def _select(self, statement: sa.Select[Any], parameters: dict[str, Any]) -> list[SessionRecord]:
        rows = await self.storage.read(lambda conn: conn.execute(statement, parameters).all())
        return [session_record(row) for row in rows]

    async def _update(self, session_id: str, **columns: Any) -> None:
        parameters = {"session_id": session_id, **columns}
        await self.storage.write(lambda conn: conn.execute(UPDATE_SESSION, parameters))


def session_record(row: sa.Row[Any]) -> SessionRecord:
    """A row of :data:`RECORD_COLUMNS` as a record."""
    values = row._asdict()
    values["system_prompt"] = SystemPrompt.from_json(values["system_prompt"])
    return SessionRecord(**values)
