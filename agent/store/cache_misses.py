"""Cache-miss events (``cache_misses``) and what recent requests left in the provider's cache
(``cache_prefixes``), for :mod:`agent.cache_misses`.

Contract:

- :meth:`CacheMissLog.record` judges one request in one transaction: it reads what the chat's recent
  requests left (its newest :data:`CONTEXT_ROWS` records) and the session's latest history anchor
  however old, stores the request's prefix record and its miss event if it had one, and forgets the
  chat's records older than :data:`KEPT_SECONDS` before this one (no cache entry outlives an hour
  unused), except that anchor. Not idempotent.
- The read API (:meth:`of_session`, :meth:`of_chat`, :meth:`of_requests`, :meth:`totals`,
  :meth:`totals_by_session`, and :data:`MISSES_PER_CHAT` for a query that joins it) sees every event
  saved before it was called. Times are seconds since the epoch; ``since`` is inclusive, ``until``
  exclusive.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa

from agent.cache_misses.diagnosis import Anchor, Cause
from agent.cache_misses.reads import Entry
from agent.db.base import Storage
from agent.db.schema import cache_misses, cache_prefixes

CONTEXT_ROWS = 64  # a chat's newest records read per request: what the next request can read is in these
KEPT_SECONDS = 3600.0 + 600.0  # the longest TTL, and a margin for the slowest answers


@dataclass(frozen=True)
class CacheMiss:
    """A request that read less from the provider's cache than it should have, and why."""

    session_key: str
    session_id: str
    request_id: int | None  # its row in ``requests`` (the turn-by-turn usage), when known
    purpose: str  # turn, cron, subagent, review, summary
    model: str
    cause: Cause
    expected_tokens: int  # what it should have read
    read_tokens: int  # what the provider reported it read
    missed_tokens: int  # paid at the uncached or cache-write price instead of the read price
    missed_usd: float  # what that difference cost
    detail: str  # one line for the operator
    created_at: float
    id: int | None = None


@dataclass(frozen=True)
class MissTotal:
    """Misses of one cause added up."""

    cause: Cause
    count: int
    missed_tokens: int
    missed_usd: float


@dataclass(frozen=True)
class PrefixRecord:
    """What one request left in the cache, and where it left the session's stored history."""

    session_key: str
    session_id: str
    model: str
    sent_at: float
    entries: Sequence[Entry]  # all of the record's own: same session, model and time
    anchor: Anchor | None


Judge = Callable[[list[Entry], Anchor | None], tuple[PrefixRecord, CacheMiss | None]]
"""Given what the chat's recent requests left (the wanted prefixes) and the session's latest history
anchor: the judged request's prefix record and its miss, if it was one."""


_RECENT = (
    sa.select(
        cache_prefixes.c.id,
        cache_prefixes.c.session_id,
        cache_prefixes.c.model,
        cache_prefixes.c.sent_at,
        cache_prefixes.c.entries,
        cache_prefixes.c.anchor,
    )
    .where(cache_prefixes.c.session_key == sa.bindparam("session_key"))
    .order_by(cache_prefixes.c.id.desc())
    .limit(CONTEXT_ROWS)
)
_LATEST_ANCHOR = (
    sa.select(cache_prefixes.c.id, cache_prefixes.c.anchor, cache_prefixes.c.model)
    .where(
        cache_prefixes.c.session_key == sa.bindparam("session_key"),
        cache_prefixes.c.session_id == sa.bindparam("session_id"),
        cache_prefixes.c.anchor.is_not(None),
    )
    .order_by(cache_prefixes.c.id.desc())
    .limit(1)
)
_INSERT_PREFIX = sa.insert(cache_prefixes)
_INSERT_MISS = sa.insert(cache_misses)
_FORGET = sa.delete(cache_prefixes).where(
    cache_prefixes.c.session_key == sa.bindparam("session_key"),
    cache_prefixes.c.sent_at < sa.bindparam("before"),
    cache_prefixes.c.id != sa.bindparam("keep"),
)
_MISS_COLUMNS = (
    cache_misses.c.id,
    cache_misses.c.session_key,
    cache_misses.c.session_id,
    cache_misses.c.request_id,
    cache_misses.c.purpose,
    cache_misses.c.model,
    cache_misses.c.cause,
    cache_misses.c.expected_tokens,
    cache_misses.c.read_tokens,
    cache_misses.c.missed_tokens,
    cache_misses.c.missed_usd,
    cache_misses.c.detail,
    cache_misses.c.created_at,
)
_TOTAL_COLUMNS = (
    cache_misses.c.cause,
    sa.func.count().label("misses"),
    sa.func.sum(cache_misses.c.missed_tokens).label("missed_tokens"),
    sa.func.sum(cache_misses.c.missed_usd).label("missed_usd"),
)


# Every chat's misses (by session key), all time: what :meth:`CacheMissLog.totals` of the chat adds up to,
# for a statement that lists chats (the console's chat list joins and sorts by it; it may narrow it to
# some chats with a WHERE on its session_key before making it a subquery).
MISSES_PER_CHAT = sa.select(
    cache_misses.c.session_key,
    sa.func.count().label("misses"),
    sa.func.sum(cache_misses.c.missed_tokens).label("missed_tokens"),
    sa.func.sum(cache_misses.c.missed_usd).label("missed_usd"),
).group_by(cache_misses.c.session_key)
_OF_REQUESTS: sa.Select[Any] = (
    sa.select(*_MISS_COLUMNS)
    .where(
        cache_misses.c.session_key == sa.bindparam("session_key"),
        cache_misses.c.request_id.in_(sa.bindparam("request_ids", expanding=True)),
    )
    .order_by(cache_misses.c.created_at, cache_misses.c.id)
)


def _entries_json(entries: Sequence[Entry]) -> str:
    return json.dumps([[e.digest, e.tokens, e.ttl] for e in entries], separators=(",", ":"))


def _prefix_row(record: PrefixRecord) -> dict[str, Any]:
    return {
        "session_key": record.session_key,
        "session_id": record.session_id,
        "model": record.model,
        "sent_at": record.sent_at,
        "entries": _entries_json(record.entries),
        "anchor": _anchor_json(record.anchor),
    }


def _anchor_json(anchor: Anchor | None) -> str | None:
    if anchor is None:
        return None
    return json.dumps(
        [anchor.message_id, anchor.message_count, anchor.digest, anchor.tokens, anchor.prompt_digest],
        separators=(",", ":"),
    )


def _anchor(raw: str | None, model: str) -> Anchor | None:
    """A stored anchor; ``model``: its row's (the model of the request that left it)."""
    if raw is None:
        return None
    message_id, count, digest, tokens, prompt_digest = json.loads(raw)
    return Anchor(int(message_id), int(count), str(digest), int(tokens), str(prompt_digest), model)


def _between(statement: sa.Select[Any], since: float | None, until: float | None) -> sa.Select[Any]:
    if since is not None:
        statement = statement.where(cache_misses.c.created_at >= since)
    if until is not None:
        statement = statement.where(cache_misses.c.created_at < until)
    return statement


def _miss(row: sa.Row[Any]) -> CacheMiss:
    return CacheMiss(
        id=int(row.id),
        session_key=row.session_key,
        session_id=row.session_id,
        request_id=None if row.request_id is None else int(row.request_id),
        purpose=row.purpose,
        model=row.model,
        cause=cast(Cause, row.cause),
        expected_tokens=int(row.expected_tokens),
        read_tokens=int(row.read_tokens),
        missed_tokens=int(row.missed_tokens),
        missed_usd=float(row.missed_usd),
        detail=row.detail,
        created_at=float(row.created_at),
    )


def _total(row: sa.Row[Any]) -> MissTotal:
    return MissTotal(
        cause=cast(Cause, row.cause),
        count=int(row.misses),
        missed_tokens=int(row.missed_tokens or 0),
        missed_usd=float(row.missed_usd or 0.0),
    )


class CacheMissLog:
    """The ``cache_prefixes`` and ``cache_misses`` tables."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def record(
        self, session_key: str, session_id: str, wanted: Collection[str], judge: Judge
    ) -> CacheMiss | None:
        """In one transaction: read what the chat's recent requests left in the cache of the prefixes
        ``wanted`` (the judged request's: no other can be read) and the session's latest history anchor;
        let ``judge`` decide the request's record and miss (it runs inside the transaction: pure and
        quick); store both; forget the chat's records too old to matter. Returns the miss."""
        parameters = {"session_key": session_key, "session_id": session_id}

        def transact(conn: sa.Connection) -> CacheMiss | None:
            rows = conn.execute(_RECENT, parameters).all()
            entries = [
                Entry(digest, tokens, ttl, sent_at, model, row_session)
                for sent_at, model, row_session, raw in (
                    (r.sent_at, r.model, r.session_id, r.entries) for r in rows
                )
                for digest, tokens, ttl in json.loads(raw)
                if digest in wanted
            ]
            found = next(
                ((r.id, r.anchor, r.model) for r in rows if r.session_id == session_id and r.anchor), None
            )
            if found is None:
                latest = conn.execute(_LATEST_ANCHOR, parameters).first()
                found = None if latest is None else (latest.id, latest.anchor, latest.model)
            record, miss = judge(entries, _anchor(found[1], found[2]) if found is not None else None)
            conn.execute(_INSERT_PREFIX, _prefix_row(record))
            if miss is not None:
                conn.execute(_INSERT_MISS, _miss_row(miss))
            before = record.sent_at - KEPT_SECONDS
            if len(rows) >= CONTEXT_ROWS or (rows and rows[-1].sent_at < before):
                keep = int(found[0]) if found is not None else -1
                conn.execute(_FORGET, {"session_key": session_key, "before": before, "keep": keep})
            return miss

        return await self.storage.write(transact)

    # -- the read API (insights, metrics, the console) ------------------------------------------

    async def of_session(self, session_id: str) -> list[CacheMiss]:
        """The misses of one session, oldest first."""
        statement = (
            sa.select(*_MISS_COLUMNS)
            .where(cache_misses.c.session_id == session_id)
            .order_by(cache_misses.c.created_at, cache_misses.c.id)
        )
        return await self._misses(statement)

    async def of_chat(
        self, session_key: str, since: float | None = None, until: float | None = None
    ) -> list[CacheMiss]:
        """The misses of one chat's sessions in ``[since, until)``, oldest first."""
        statement: sa.Select[Any] = sa.select(*_MISS_COLUMNS).where(cache_misses.c.session_key == session_key)
        statement = _between(statement, since, until).order_by(cache_misses.c.created_at, cache_misses.c.id)
        return await self._misses(statement)

    async def of_requests(self, session_key: str, request_ids: Sequence[int]) -> list[CacheMiss]:
        """The misses of one chat on the requests ``request_ids`` (rows of ``requests``), oldest first."""
        if not request_ids:
            return []
        parameters = {"session_key": session_key, "request_ids": list(request_ids)}
        rows = await self.storage.read(lambda conn: conn.execute(_OF_REQUESTS, parameters).all())
        return [_miss(row) for row in rows]

    async def totals(
        self, since: float | None = None, until: float | None = None, session_key: str | None = None
    ) -> list[MissTotal]:
        """Misses by cause in ``[since, until)`` (of one chat, or all), the most expensive first."""
        statement = sa.select(*_TOTAL_COLUMNS).group_by(cache_misses.c.cause)
        if session_key is not None:
            statement = statement.where(cache_misses.c.session_key == session_key)
        statement = _between(statement, since, until)
        rows = await self.storage.read(lambda conn: conn.execute(statement).all())
        return sorted((_total(row) for row in rows), key=lambda t: (-t.missed_usd, t.cause))

    async def totals_by_session(self, session_ids: Sequence[str]) -> dict[str, list[MissTotal]]:
        """For each of ``session_ids`` that missed: its misses by cause, the most expensive first."""
        if not session_ids:
            return {}
        statement = (
            sa.select(cache_misses.c.session_id, *_TOTAL_COLUMNS)
            .where(cache_misses.c.session_id.in_(list(session_ids)))
            .group_by(cache_misses.c.session_id, cache_misses.c.cause)
        )
        rows = await self.storage.read(lambda conn: conn.execute(statement).all())
        found: dict[str, list[MissTotal]] = {}
        for row in rows:
            found.setdefault(row.session_id, []).append(_total(row))
        return {key: sorted(totals, key=lambda t: (-t.missed_usd, t.cause)) for key, totals in found.items()}

    async def _misses(self, statement: sa.Select[Any]) -> list[CacheMiss]:
        rows = await self.storage.read(lambda conn: conn.execute(statement).all())
        return [_miss(row) for row in rows]


def _miss_row(miss: CacheMiss) -> dict[str, Any]:
    return {
        "session_key": miss.session_key,
        "session_id": miss.session_id,
        "request_id": miss.request_id,
        "purpose": miss.purpose,
        "model": miss.model,
        "cause": miss.cause,
        "expected_tokens": miss.expected_tokens,
        "read_tokens": miss.read_tokens,
        "missed_tokens": miss.missed_tokens,
        "missed_usd": miss.missed_usd,
        "detail": miss.detail,
        "created_at": miss.created_at,
    }
