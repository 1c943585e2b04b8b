"""Retention of the agent's tables that grow with every request, and forgetting a chat.

Contract:

- Every pruning method handles at most ``batch`` rows in one short transaction and returns how many it
  handled, so a caller repeats it until it returns less than ``batch`` (a gateway's turns wait for one
  batch at most). ``dry_run`` counts what the same call repeated would handle, and changes nothing.
  Rows another process is pruning at the same moment are skipped (``SKIP LOCKED`` on PostgreSQL).
- :meth:`AgentRetention.roll_up_usage` adds requests into ``usage_days`` (one row per UTC day, session,
  purpose, provider and model) and deletes them in the same transaction: every sum over requests
  (:meth:`agent.store.usage.UsageLedger.by_purpose`) is the same before and after. The sessions' own
  totals are not touched.
- :meth:`AgentRetention.forget_chat` removes what one chat (a session key) said: its messages (in
  batches; a second call finishes what a first one left), the files only they carried, its cache
  records and its audit; its sessions stay as tombstones that keep only their money figures (tokens,
  cost, requests, renamed to ``pseudonym``), so every total and budget stays exact. Idempotent: a
  forgotten key has no sessions left to find.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import (
    SUMMED,
    cache_misses,
    cache_prefixes,
    media,
    messages,
    requests,
    sessions,
    spend_notices,
    spend_windows,
    tool_audit,
    usage_days,
)
from agent.db.sql import dialect_insert
from agent.prompt import SystemPrompt
from agent.store.usage import BATCH_SUFFIX

_DAY_KEY = ("day", "session_id", "purpose", "provider", "model")
_NO_PROMPT = SystemPrompt("", "", "").to_json()  # a tombstone's: it sends nothing again
_SHORT_WINDOWS = sa.or_(spend_windows.c.period.startswith("day:"), spend_windows.c.period.startswith("run:"))
_SHORT_NOTICES = sa.or_(spend_notices.c.period.startswith("day:"), spend_notices.c.period.startswith("run:"))


def utc_day(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).date().isoformat()


def _adding(dialect: str) -> Any:
    """``INSERT`` of a day's row, adding to the row when it exists."""
    statement = dialect_insert(dialect)(usage_days)
    added = {name: usage_days.c[name] + statement.excluded[name] for name in ("requests", *SUMMED)}
    return statement.on_conflict_do_update(index_elements=list(_DAY_KEY), set_=added)


def _batch_of(column: sa.Column[Any], where: sa.ColumnElement[bool], batch: int) -> sa.Select[Any]:
    """The keys of up to ``batch`` rows matching ``where``, locked (skipped if another process has them)."""
    return sa.select(column).where(where).order_by(column).limit(batch).with_for_update(skip_locked=True)


def _count(conn: sa.Connection, table: sa.Table, where: sa.ColumnElement[bool]) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one())


@dataclass
class Forgotten:
    """What forgetting a chat removed (or, for tombstones, renamed)."""

    sessions: int = 0
    messages: int = 0
    files: int = 0
    audit: int = 0
    memory_scopes: list[str] = field(default_factory=list)


class AgentRetention:
    """Pruning and forgetting over the agent's tables (see the module)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def _delete_batch(
        self, table: sa.Table, key: sa.Column[Any], where: sa.ColumnElement[bool], batch: int, dry_run: bool
    ) -> int:
        if dry_run:
            return await self.storage.read(lambda conn: _count(conn, table, where))

        def delete(conn: sa.Connection) -> int:
            keys = list(conn.execute(_batch_of(key, where, batch)).scalars())
            if keys:
                conn.execute(sa.delete(table).where(key.in_(keys)))
            return len(keys)

        return await self.storage.write(delete)

    async def roll_up_usage(self, before: float, batch: int, *, dry_run: bool = False) -> int:
        """Add up to ``batch`` requests made before ``before`` into ``usage_days`` and delete them."""
        old = requests.c.created_at < before
        if dry_run:
            return await self.storage.read(lambda conn: _count(conn, requests, old))

        def roll(conn: sa.Connection) -> int:
            ids = list(conn.execute(_batch_of(requests.c.id, old, batch)).scalars())
            if not ids:
                return 0
            rows = conn.execute(sa.select(requests).where(requests.c.id.in_(ids)).order_by(requests.c.id))
            days: dict[tuple[Any, ...], dict[str, Any]] = defaultdict(dict)
            for row in rows:
                purpose = row.purpose + BATCH_SUFFIX if row.batch else row.purpose  # its line, as by_purpose
                key = (utc_day(row.created_at), row.session_id, purpose, row.provider, row.model)
                day = days[key]
                if not day:
                    day.update(dict(zip(_DAY_KEY, key, strict=True)), requests=0, **dict.fromkeys(SUMMED, 0))
                day["requests"] += 1
                for name in SUMMED:
                    day[name] += getattr(row, name)
            conn.execute(_adding(conn.dialect.name), list(days.values()))
            conn.execute(sa.delete(requests).where(requests.c.id.in_(ids)))
            return len(ids)

        return await self.storage.write(roll)

    async def prune_cache_misses(self, before: float, batch: int, *, dry_run: bool = False) -> int:
        where = cache_misses.c.created_at < before
        return await self._delete_batch(cache_misses, cache_misses.c.id, where, batch, dry_run)

    async def prune_audit(self, before: float, batch: int, *, dry_run: bool = False) -> int:
        where = tool_audit.c.created_at < before
        return await self._delete_batch(tool_audit, tool_audit.c.id, where, batch, dry_run)

    async def prune_spend_windows(self, before: float, batch: int, *, dry_run: bool = False) -> int:
        """Day and run windows (and their notices) last changed before ``before``; months are kept."""
        where = sa.and_(_SHORT_WINDOWS, spend_windows.c.updated_at < before)
        notices = sa.and_(_SHORT_NOTICES, spend_notices.c.created_at < before)
        if dry_run:
            return await self.storage.read(
                lambda conn: _count(conn, spend_windows, where) + _count(conn, spend_notices, notices)
            )

        def delete(conn: sa.Connection) -> int:
            key = sa.tuple_(spend_windows.c.scope, spend_windows.c.period)
            found = conn.execute(
                sa.select(spend_windows.c.scope, spend_windows.c.period).where(where).limit(batch)
            ).all()
            if found:
                conn.execute(sa.delete(spend_windows).where(key.in_([tuple(row) for row in found])))
            gone = conn.execute(
                sa.delete(spend_notices).where(
                    sa.tuple_(spend_notices.c.scope, spend_notices.c.period, spend_notices.c.audience).in_(
                        sa.select(spend_notices.c.scope, spend_notices.c.period, spend_notices.c.audience)
                        .where(notices)
                        .limit(batch)
                    )
                )
            )
            return len(found) + int(gone.rowcount or 0)

        return await self.storage.write(delete)

    # -- forgetting ----------------------------------------------------------------------------------

    async def files_of_chat(self, session_key: str) -> set[str]:
        """The SHA-256 of every file the chat's messages carry."""
        query = (
            sa.select(messages.c.media)
            .join(sessions, sessions.c.id == messages.c.session_id)
            .where(sessions.c.session_key == session_key, messages.c.media.is_not(None))
        )
        rows = await self.storage.read(lambda conn: conn.execute(query).scalars().all())
        return {ref["sha256"] for text in rows for ref in _refs(text)}

    async def forget_chat(self, session_key: str, pseudonym: str, batch: int) -> Forgotten:
        """Forget the chat ``session_key`` (see the module); its sessions are renamed ``pseudonym``."""
        gone = Forgotten()
        ids_query = sa.select(sessions.c.id, sessions.c.memory_scope).where(
            sessions.c.session_key == session_key
        )
        found = await self.storage.read(lambda conn: conn.execute(ids_query).all())
        if not found:
            return gone
        ids = [row.id for row in found]
        gone.memory_scopes = sorted({row.memory_scope for row in found})
        files = await self.files_of_chat(session_key)
        of_chat = messages.c.session_id.in_(ids)
        while (deleted := await self._delete_batch(messages, messages.c.id, of_chat, batch, False)) > 0:
            gone.messages += deleted
        gone.files = await self.forget_files(files)

        def tombstone(conn: sa.Connection) -> None:
            conn.execute(
                sa.update(sessions)
                .where(sessions.c.id.in_(ids))
                .values(
                    session_key=pseudonym,
                    chat_id=None,
                    user_id=None,
                    title=None,
                    system_prompt=_NO_PROMPT,
                    tools_json="[]",
                    todos_json="[]",
                    message_count=0,
                    memory_scope=pseudonym,
                )
            )
            conn.execute(sa.delete(cache_prefixes).where(cache_prefixes.c.session_key == session_key))
            conn.execute(
                sa.update(cache_misses)
                .where(cache_misses.c.session_key == session_key)
                .values(session_key=pseudonym, detail="")
            )
            audit = conn.execute(sa.delete(tool_audit).where(tool_audit.c.session_key == session_key))
            gone.audit = int(audit.rowcount or 0)

        await self.storage.write(tombstone)
        gone.sessions = len(ids)
        return gone

    async def direct_chats(self, platform: str, user_id: str) -> list[str]:
        """The session keys of the person's direct chats, as their sessions name them."""
        query = (
            sa.select(sessions.c.session_key)
            .where(
                sessions.c.platform == platform,
                sessions.c.user_id == user_id,
                sessions.c.session_key.startswith(f"{platform}:dm:", autoescape=True),
            )
            .distinct()
        )
        return sorted(await self.storage.read(lambda conn: list(conn.execute(query).scalars())))

    async def pseudonymise_spending(self, scope: str, pseudonym: str) -> None:
        """Rename the spending windows of ``scope`` (``chat:KEY``, ``person:PLATFORM:ID``) to
        ``KIND:pseudonym``, keeping their amounts (the bot's own windows are not touched), and drop who
        was told about them."""
        kind = scope.split(":", 1)[0]

        def rename(conn: sa.Connection) -> None:
            conn.execute(
                sa.update(spend_windows)
                .where(spend_windows.c.scope == scope)
                .values(scope=f"{kind}:{pseudonym}")
            )
            conn.execute(sa.delete(spend_notices).where(spend_notices.c.scope == scope))

        await self.storage.write(rename)

    async def forget_person_marks(self, person: str) -> None:
        """The person (``platform:user_id``) no longer named in the audit of other chats."""

        def unname(conn: sa.Connection) -> None:
            conn.execute(sa.update(tool_audit).where(tool_audit.c.person == person).values(person=None))
            conn.execute(
                sa.update(tool_audit).where(tool_audit.c.decided_by == person).values(decided_by=None)
            )

        await self.storage.write(unname)

    async def forget_files(self, hashes: Collection[str]) -> int:
        """Delete the files of ``hashes`` that no message carries any more."""
        if not hashes:
            return 0

        def delete(conn: sa.Connection) -> int:
            unused = [
                sha
                for sha in sorted(hashes)
                if conn.execute(
                    sa.select(messages.c.id).where(messages.c.media.contains(sha, autoescape=True)).limit(1)
                ).first()
                is None
            ]
            if not unused:
                return 0
            return int(conn.execute(sa.delete(media).where(media.c.sha256.in_(unused))).rowcount or 0)

        return await self.storage.write(delete)


def _refs(text: str) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = json.loads(text)
    return value
