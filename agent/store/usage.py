"""What each provider request used and cost (the ``requests`` table), and the session totals it adds to.

Contract:

- :meth:`UsageLedger.record` stores one request and adds it to its session's totals in one
  transaction: both or neither, so the totals always equal the sum of the session's requests (and
  ``request_count`` their number), counting those retention added up per day into ``usage_days``
  (:mod:`agent.store.retention`). Given ``spend`` keys, the request's cost is added to those spending
  windows in the same transaction (:func:`agent.store.spending.add_spend`). It is not idempotent (each
  call adds); retry only a call that raised :class:`~agent.db.errors.StorageUnavailable` (nothing was
  stored).
- ``last_prompt_tokens`` is the prompt size the session's next request starts from: set by
  :meth:`UsageLedger.record` for conversation requests (:data:`agent.usage.CONVERSATION_PURPOSES`) and
  by compression (:meth:`UsageLedger.set_last_prompt_tokens`) after it shrank the history.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import SUMMED, requests, sessions, usage_days
from agent.store.sessions import UPDATE_SESSION
from agent.store.spending import SpendKey, add_spend
from agent.usage import CONVERSATION_PURPOSES, RequestUsage, Usage


@dataclass(frozen=True)
class Recorded:
    """A request once stored: its row in ``requests``, and what each spending window it was added to
    has spent now."""

    request_id: int
    spent: dict[SpendKey, float]


@dataclass(frozen=True)
class PurposeUsage:
    """The requests of one purpose ("turn", "summary", "cron", ...) added up."""

    purpose: str
    requests: int
    usage: Usage
    cost: float
    uncached_cost: float
    characters: int = 0  # text spoken (speech requests are billed per character)


def _added(column: sa.Column[Any]) -> sa.ColumnElement[Any]:
    """``column + :column`` (the parameter named after the column)."""
    return column + sa.bindparam(f"add_{column.name}", type_=column.type)


PACING_SESSIONS = 3  # a chat's latest sessions whose requests pace its TTLs (``/new`` keeps its pacing)
_INSERT = sa.insert(requests).returning(requests.c.id)
_ADD_TO_TOTALS = UPDATE_SESSION.values(
    {
        column.name: _added(column)
        for column in (
            sessions.c.input_tokens,
            sessions.c.output_tokens,
            sessions.c.cache_read_tokens,
            sessions.c.cache_write_tokens,
            sessions.c.estimated_cost,
            sessions.c.uncached_cost,
        )
    }
    | {"request_count": sessions.c.request_count + 1, "updated_at": sa.bindparam("now", type_=sa.Double)}
)
_ADD_TO_TOTALS_AND_PROMPT = _ADD_TO_TOTALS.values(last_prompt_tokens=sa.bindparam("prompt_tokens"))
# Not IN (...): the parameters of an IN list are expanded into the SQL at every execution.
_CONVERSATION = sa.or_(*(requests.c.purpose == purpose for purpose in CONVERSATION_PURPOSES))
_CHATS_LATEST_SESSIONS = (
    sa.select(sessions.c.id)
    .where(sessions.c.session_key == sa.bindparam("session_key"))
    .order_by(sessions.c.updated_at.desc())
    .limit(PACING_SESSIONS)
)
_CHAT_CONVERSATION_TIMES = (
    sa.select(requests.c.created_at)
    .where(
        requests.c.session_id.in_(_CHATS_LATEST_SESSIONS.scalar_subquery()),
        _CONVERSATION,
        requests.c.created_at >= sa.bindparam("since"),
    )
    .order_by(requests.c.id.desc())
    .limit(sa.bindparam("limit"))
)
BATCH_SUFFIX = " (batch)"  # a purpose's batch requests are their own line: "cron (batch)"
# The purpose a request counts under: its own, or its batch line (retention's day rows keep the same).
PURPOSE_LINE = sa.case((requests.c.batch, requests.c.purpose + BATCH_SUFFIX), else_=requests.c.purpose)
_SESSIONS_OF_KEY = sa.select(sessions.c.id).where(sessions.c.session_key == sa.bindparam("session_key"))


def _per_purpose(of_key: bool) -> sa.Subquery:
    """Every request (of one chat's sessions, or all) summed per purpose line: those still in
    ``requests`` and those retention added up per day (``usage_days``), each table summed on its own
    before the two are added. For the whole home each is read through its ``*_by_purpose`` index alone,
    in the index's order (no table row, no sort of every request); for a chat, through its sessions."""
    recent = sa.select(
        PURPOSE_LINE.label("purpose"),
        sa.func.count().label("requests"),
        *(sa.func.sum(requests.c[name]).label(name) for name in SUMMED),
    ).group_by(requests.c.batch, requests.c.purpose)  # the index's order
    days = sa.select(
        usage_days.c.purpose,
        sa.func.sum(usage_days.c.requests).label("requests"),
        *(sa.func.sum(usage_days.c[name]).label(name) for name in SUMMED),
    ).group_by(usage_days.c.purpose)
    if of_key:
        recent = recent.where(requests.c.session_id.in_(_SESSIONS_OF_KEY.scalar_subquery()))
        days = days.where(usage_days.c.session_id.in_(_SESSIONS_OF_KEY.scalar_subquery()))
    return sa.union_all(recent, days).subquery("per_purpose")


def _by_purpose(of_key: bool) -> sa.Select[Any]:
    """:func:`_per_purpose`'s two tables added per purpose line, the most expensive first."""
    summed = _per_purpose(of_key)
    totals = {name: sa.func.sum(summed.c[name]).label(name) for name in ("requests", *SUMMED)}
    statement = sa.select(summed.c.purpose, *totals.values()).group_by(summed.c.purpose)
    return statement.order_by(totals["estimated_cost"].desc(), summed.c.purpose)


BY_PURPOSE = _by_purpose(of_key=False)
BY_PURPOSE_OF_KEY = _by_purpose(of_key=True)


class UsageLedger:
    """The ``requests`` table and the usage totals of ``sessions``."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def record(
        self,
        session_id: str,
        request: RequestUsage,
        *,
        at: float | None = None,
        sent_at: float | None = None,
        spend: Sequence[SpendKey] = (),
    ) -> Recorded:
        """Store one provider request's usage and add it to the session's totals (and its cost to the
        ``spend`` windows).

        ``at``: now (the session's last activity); ``sent_at``: when the request was sent, which is
        when its cache entries were written or refreshed (what TTL pacing measures); default ``at``."""
        now = time.time() if at is None else at
        u = request.usage
        row = {
            "session_id": session_id,
            "purpose": request.purpose,
            "provider": request.provider,
            "model": request.model,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_tokens": u.cache_read_tokens,
            "cache_write_5m_tokens": u.cache_write_5m_tokens,
            "cache_write_1h_tokens": u.cache_write_1h_tokens,
            "estimated_cost": request.cost,
            "uncached_cost": request.uncached_cost,
            "created_at": now if sent_at is None else sent_at,
            "characters": request.characters,
            "batch": request.batch,
        }
        totals = {
            "session_id": session_id,
            "add_input_tokens": u.input_tokens,
            "add_output_tokens": u.output_tokens,
            "add_cache_read_tokens": u.cache_read_tokens,
            "add_cache_write_tokens": u.cache_write_tokens,
            "add_estimated_cost": request.cost,
            "add_uncached_cost": request.uncached_cost,
            "now": now,
            "prompt_tokens": u.prompt_tokens,
        }
        conversation = request.purpose in CONVERSATION_PURPOSES

        def insert(conn: sa.Connection) -> Recorded:
            conn.execute(_ADD_TO_TOTALS_AND_PROMPT if conversation else _ADD_TO_TOTALS, totals)
            request_id = int(conn.execute(_INSERT, row).scalar_one())
            return Recorded(request_id, add_spend(conn, spend, request.cost, now))

        return await self.storage.write(insert)

    async def set_last_prompt_tokens(self, session_id: str, tokens: int | None) -> None:
        parameters = {"session_id": session_id, "last_prompt_tokens": tokens}
        await self.storage.write(lambda conn: conn.execute(UPDATE_SESSION, parameters))

    async def chat_request_times(self, session_key: str, since: float, limit: int) -> list[float]:
        """When the chat's latest ``limit`` conversation requests since ``since`` were made, over all
        its sessions, oldest first (TTL pacing: a chat that paused yesterday pauses in a new session)."""
        parameters = {"session_key": session_key, "since": since, "limit": limit}
        times = await self.storage.read(
            lambda conn: conn.execute(_CHAT_CONVERSATION_TIMES, parameters).scalars().all()
        )
        return [float(value) for value in reversed(times)]

    async def by_purpose(self, session_key: str | None = None) -> list[PurposeUsage]:
        """Requests summed per purpose (of one chat's sessions, or all), the most expensive first; those
        retention added up per day (``usage_days``) included."""
        if session_key is None:
            statement, parameters = BY_PURPOSE, {}
        else:
            statement, parameters = BY_PURPOSE_OF_KEY, {"session_key": session_key}
        rows = await self.storage.read(lambda conn: conn.execute(statement, parameters).all())
        return [
            PurposeUsage(
                purpose=row.purpose,
                requests=int(row.requests),
                usage=Usage(
                    input_tokens=int(row.input_tokens),
                    output_tokens=int(row.output_tokens),
                    cache_read_tokens=int(row.cache_read_tokens),
                    cache_write_5m_tokens=int(row.cache_write_5m_tokens),
                    cache_write_1h_tokens=int(row.cache_write_1h_tokens),
                ),
                cost=float(row.estimated_cost),
                uncached_cost=float(row.uncached_cost),
                characters=int(row.characters or 0),
            )
            for row in rows
        ]
