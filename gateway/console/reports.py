"""What the console's pages show of spend and use, read with SQL aggregates (never row by row in Python).

The console must stay fast with tens of thousands of sessions and millions of requests, and on SQLite
every read waits its turn on the one database thread that turns write through: so each figure is one
aggregate statement, built once at module level, and the chat list is sorted and cut into pages by the
database. Sums and ratios reuse ``gateway.insights`` (:class:`~gateway.insights.UsageRow`), so the
console and ``herald insights`` count alike.

Days are calendar days in ``scheduler.timezone`` (the zone budgets reset in); "7 days" is today and the
six days before it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.schema import cron_jobs, inbox, requests, sessions
from agent.storage.sql import json_text
from agent.store import PurposeUsage, SessionStore
from agent.usage import Usage
from gateway.addressing import chat_of_session_key
from gateway.cron.jobs import SESSION_PREFIX
from gateway.insights import UsageRow, row_for_purpose, total_row

DAYS = 30  # the overview's chart and its longest window
WINDOWS = (("today", 1), ("7 days", 7), ("30 days", DAYS))
PAGE_SIZE = 50
TURN_LIMIT = 200  # requests shown in one chat's chart (the latest)


@dataclass(frozen=True)
class Day:
    start: float  # the day's first second, in the scheduler's time zone
    date: dt.date
    requests: int
    usage: UsageRow


@dataclass(frozen=True)
class Spent:
    """What the requests of one purpose spent (in a day)."""

    purpose: str
    requests: int
    usage: UsageRow


@dataclass(frozen=True)
class Window:
    label: str  # "today", "7 days", "30 days"
    requests: int
    usage: UsageRow


@dataclass(frozen=True)
class Overview:
    days: list[Day]  # the last DAYS days, oldest first, today last
    windows: list[Window]
    purposes: list[UsageRow]  # over the last DAYS days, labelled like `herald insights`
    all_time: UsageRow  # every session ever (from the sessions' totals)
    sessions: int
    chats: int


def day_starts(now: float, tz: dt.tzinfo, days: int = DAYS) -> list[tuple[dt.date, float]]:
    """The first second of each of the last ``days`` calendar days in ``tz``, oldest first (a day of a
    daylight-saving change is 23 or 25 hours long)."""
    today = dt.datetime.fromtimestamp(now, tz).date()
    dates = [today - dt.timedelta(days=back) for back in range(days - 1, -1, -1)]
    return [(date, dt.datetime.combine(date, dt.time(), tzinfo=tz).timestamp()) for date in dates]


def _usage_columns(table: sa.Table) -> list[sa.ColumnElement[Any]]:
    return [
        sa.func.count().label("requests"),
        sa.func.coalesce(sa.func.sum(table.c.input_tokens), 0).label("input_tokens"),
        sa.func.coalesce(sa.func.sum(table.c.cache_read_tokens), 0).label("cache_read"),
        sa.func.coalesce(sa.func.sum(table.c.cache_write_5m_tokens + table.c.cache_write_1h_tokens), 0).label(
            "cache_write"
        ),
        sa.func.coalesce(sa.func.sum(table.c.output_tokens), 0).label("output_tokens"),
        sa.func.coalesce(sa.func.sum(table.c.estimated_cost), 0).label("cost"),
        sa.func.coalesce(sa.func.sum(table.c.uncached_cost), 0).label("uncached_cost"),
    ]


# Which day a request falls on: the index of the last day start at or before it (0 = DAYS-1 days ago).
# One scan of past days gives both the daily chart and the purposes; today is read on its own (through
# the index by time), since past days no longer change.
_DAY_INDEX = sa.case(
    *((requests.c.created_at >= sa.bindparam(f"day{i}", type_=sa.Double), i) for i in range(DAYS - 1, 0, -1)),
    else_=0,
).label("day")
_SINCE = requests.c.created_at >= sa.bindparam("since", type_=sa.Double)
_BY_DAY_AND_PURPOSE = (
    sa.select(_DAY_INDEX, requests.c.purpose, *_usage_columns(requests))
    .where(_SINCE, requests.c.created_at < sa.bindparam("until", type_=sa.Double))
    .group_by(_DAY_INDEX, requests.c.purpose)
)
_BY_PURPOSE_SINCE = (
    sa.select(requests.c.purpose, *_usage_columns(requests)).where(_SINCE).group_by(requests.c.purpose)
)
_ALL_TIME = sa.select(
    sa.func.count().label("sessions"),
    sa.func.count(sa.distinct(sessions.c.session_key)).label("chats"),
    sa.func.coalesce(sa.func.sum(sessions.c.input_tokens), 0).label("input_tokens"),
    sa.func.coalesce(sa.func.sum(sessions.c.cache_read_tokens), 0).label("cache_read"),
    sa.func.coalesce(sa.func.sum(sessions.c.cache_write_tokens), 0).label("cache_write"),
    sa.func.coalesce(sa.func.sum(sessions.c.output_tokens), 0).label("output_tokens"),
    sa.func.coalesce(sa.func.sum(sessions.c.estimated_cost), 0).label("cost"),
    sa.func.coalesce(sa.func.sum(sessions.c.uncached_cost), 0).label("uncached_cost"),
)


def _row(label: str, row: Any) -> UsageRow:
    """The ``UsageRow`` of an aggregate row (columns named as in :func:`_usage_columns`)."""
    return UsageRow(
        label=label,
        input_tokens=int(row.input_tokens),
        cache_read=int(row.cache_read),
        cache_write=int(row.cache_write),
        output_tokens=int(row.output_tokens),
        cost=float(row.cost),
        uncached_cost=float(row.uncached_cost),
    )


EMPTY = UsageRow("", 0, 0, 0, 0, 0.0, 0.0)


# --- the chat list ---------------------------------------------------------------------------------


class ChatSort(StrEnum):
    """The columns the chat list sorts by in the database."""

    PLATFORM = "platform"
    TITLE = "title"
    REQUESTS = "requests"
    SPEND = "spend"
    HIT = "hit"
    ACTIVE = "active"


@dataclass(frozen=True)
class ChatRow:
    session_key: str
    platform: str
    title: str | None  # the title of the chat's latest session (its first message), as the person wrote it
    sessions: int
    requests: int
    usage: UsageRow
    last_active: float
    name: str | None = None  # the group's title or the person's name, as the platform last gave it
    people: int | None = None  # people who wrote in it (None: not a chat people write in)


@dataclass(frozen=True)
class ChatPage:
    rows: list[ChatRow]
    total: int  # chats in all
    page: int  # 1-based
    pages: int
    sort: ChatSort
    descending: bool


_TOTALS = (
    sa.select(
        sessions.c.session_key,
        sa.func.min(sessions.c.platform).label("platform"),
        sa.func.count().label("sessions"),
        sa.func.sum(sessions.c.request_count).label("requests"),
        sa.func.sum(sessions.c.input_tokens).label("input_tokens"),
        sa.func.sum(sessions.c.cache_read_tokens).label("cache_read"),
        sa.func.sum(sessions.c.cache_write_tokens).label("cache_write"),
        sa.func.sum(sessions.c.output_tokens).label("output_tokens"),
        sa.func.sum(sessions.c.estimated_cost).label("cost"),
        sa.func.sum(sessions.c.uncached_cost).label("uncached_cost"),
        sa.func.max(sessions.c.updated_at).label("last_active"),
    )
    .group_by(sessions.c.session_key)
    .subquery("totals")
)
_latest = sessions.alias("latest")
_LATEST_TITLE = (
    sa.select(_latest.c.title)
    .where(_latest.c.session_key == _TOTALS.c.session_key)
    .order_by(_latest.c.updated_at.desc())
    .limit(1)
    .scalar_subquery()
    .label("title")
)
_PROMPT = _TOTALS.c.input_tokens + _TOTALS.c.cache_read + _TOTALS.c.cache_write
_HIT = sa.case((_PROMPT > 0, _TOTALS.c.cache_read * 1.0 / _PROMPT), else_=0.0)
_SORT_COLUMNS: dict[ChatSort, sa.ColumnElement[Any]] = {
    ChatSort.PLATFORM: _TOTALS.c.platform,
    ChatSort.TITLE: _LATEST_TITLE,
    ChatSort.REQUESTS: _TOTALS.c.requests,
    ChatSort.SPEND: _TOTALS.c.cost,
    ChatSort.HIT: _HIT,
    ChatSort.ACTIVE: _TOTALS.c.last_active,
}
_CHAT_LIST = sa.select(_TOTALS, _LATEST_TITLE)


def _chat_page_statement(sort: ChatSort, descending: bool) -> sa.Select[Any]:
    column = _SORT_COLUMNS[sort]
    order = column.desc() if descending else column.asc()
    return (
        _CHAT_LIST.order_by(order, _TOTALS.c.session_key)
        .limit(sa.bindparam("limit"))
        .offset(sa.bindparam("offset"))
    )


_CHAT_PAGES = {
    (sort, descending): _chat_page_statement(sort, descending)
    for sort in ChatSort
    for descending in (False, True)
}
_CHAT_COUNT = sa.select(sa.func.count(sa.distinct(sessions.c.session_key)))

# Names and people of the chats on one page, from what the platforms delivered (the inbox). Each chat's
# rows are found through the inbox's unique index (platform, chat_id, ...).
_SENDER = json_text(inbox.c.message, "user_id")
_PEOPLE = (
    sa.select(
        inbox.c.platform,
        inbox.c.chat_id,
        sa.func.count(sa.distinct(_SENDER)).label("people"),
        sa.func.max(inbox.c.id).label("latest"),
    )
    .where(sa.tuple_(inbox.c.platform, inbox.c.chat_id).in_(sa.bindparam("chats", expanding=True)))
    .group_by(inbox.c.platform, inbox.c.chat_id)
)
_NAMES = sa.select(
    inbox.c.platform,
    inbox.c.chat_id,
    json_text(inbox.c.message, "chat_type").label("chat_type"),
    json_text(inbox.c.message, "chat_title").label("chat_title"),
    json_text(inbox.c.message, "user_name").label("user_name"),
).where(inbox.c.id.in_(sa.bindparam("ids", expanding=True)))
_JOB_NAMES = sa.select(cron_jobs.c.id, cron_jobs.c.name).where(
    cron_jobs.c.id.in_(sa.bindparam("ids", expanding=True))
)


# --- one chat ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One provider request of a chat, for its chart."""

    request_id: int
    session_id: str
    purpose: str
    model: str
    created_at: float
    input_tokens: int  # uncached
    cache_read: int
    cache_write: int
    output_tokens: int
    cost: float


_TURNS = (
    sa.select(
        requests.c.id,
        requests.c.session_id,
        requests.c.purpose,
        requests.c.model,
        requests.c.created_at,
        requests.c.input_tokens,
        requests.c.cache_read_tokens,
        (requests.c.cache_write_5m_tokens + requests.c.cache_write_1h_tokens).label("cache_write"),
        requests.c.output_tokens,
        requests.c.estimated_cost,
    )
    .select_from(requests.join(sessions, sessions.c.id == requests.c.session_id))
    .where(sessions.c.session_key == sa.bindparam("session_key"))
    .order_by(requests.c.id.desc())
    .limit(sa.bindparam("limit"))
)

_REQUEST_COUNT = sa.select(sa.func.coalesce(sa.func.sum(sessions.c.request_count), 0)).where(
    sessions.c.session_key == sa.bindparam("session_key")
)


class Reports:
    """The console's figures, read from ``storage`` (the agent's tables and the gateway's)."""

    def __init__(self, storage: Storage, store: SessionStore, timezone: dt.tzinfo) -> None:
        self.storage = storage
        self.store = store
        self.timezone = timezone
        self._past: dict[float, list[Spent]] = {}  # a past day's start -> what it spent, per purpose

    async def overview(self, now: float) -> Overview:
        """Spend per day and purpose over the last :data:`DAYS` days. A past day is read once and kept
        (requests are recorded when they are made, so a day that is over does not change); each call
        reads today's requests and the sessions' totals."""
        starts = day_starts(now, self.timezone)
        today = starts[-1][1]
        missing = [i for i, (_, start) in enumerate(starts[:-1]) if start not in self._past]
        parameters = {f"day{i}": start for i, (_, start) in enumerate(starts)}

        def read(conn: sa.Connection) -> tuple[Sequence[Any], Sequence[Any], Any]:
            past: Sequence[Any] = []
            if missing:
                span = {**parameters, "since": starts[missing[0]][1], "until": today}
                past = conn.execute(_BY_DAY_AND_PURPOSE, span).all()
            current = conn.execute(_BY_PURPOSE_SINCE, {"since": today}).all()
            return past, current, conn.execute(_ALL_TIME).one()

        past, current, totals = await self.storage.read(read)
        for i in missing:
            self._past[starts[i][1]] = [_spent(row) for row in past if int(row.day) == i]
        self._past = {start: self._past[start] for _, start in starts[:-1]}  # forget days out of view
        spent = [*self._past.values(), [_spent(row) for row in current]]
        days = []
        for (date, start), of_day in zip(starts, spent, strict=True):
            usage = replace(total_row([s.usage for s in of_day]), label=date.isoformat())
            days.append(Day(start, date, sum(s.requests for s in of_day), usage))
        windows = [
            Window(
                label,
                sum(d.requests for d in days[-n:]),
                replace(total_row([d.usage for d in days[-n:]]), label=label),
            )
            for label, n in WINDOWS
        ]
        return Overview(
            days=days,
            windows=windows,
            purposes=_by_purpose([s for of_day in spent for s in of_day]),
            all_time=_row("all time", totals),
            sessions=int(totals.sessions),
            chats=int(totals.chats),
        )

    async def chats(self, sort: ChatSort, descending: bool, page: int) -> ChatPage:
        """One page of the chat list (a chat is a session key: a direct chat, a group or topic, a
        scheduled job's runs, the terminal), sorted by ``sort``."""
        statement = _CHAT_PAGES[(sort, descending)]

        def read(conn: sa.Connection) -> tuple[int, list[Any]]:
            total = int(conn.execute(_CHAT_COUNT).scalar_one())
            pages = max(1, -(-total // PAGE_SIZE))
            chosen = min(max(1, page), pages)
            parameters = {"limit": PAGE_SIZE, "offset": (chosen - 1) * PAGE_SIZE}
            return total, [chosen, *conn.execute(statement, parameters).all()]

        total, (chosen, *rows) = await self.storage.read(read)
        chats = [
            ChatRow(
                session_key=row.session_key,
                platform=row.platform,
                title=row.title,
                sessions=int(row.sessions),
                requests=int(row.requests),
                usage=_row(row.session_key, row),
                last_active=float(row.last_active),
            )
            for row in rows
        ]
        return ChatPage(
            rows=await self.named(chats),
            total=total,
            page=chosen,
            pages=max(1, -(-total // PAGE_SIZE)),
            sort=sort,
            descending=descending,
        )

    async def named(self, rows: Sequence[ChatRow]) -> list[ChatRow]:
        """``rows`` with each chat's name and people: from the latest message the platform delivered in
        it, or the scheduled job's name."""
        addresses = {row.session_key: chat_of_session_key(row.session_key) for row in rows}
        chats = sorted({(a.platform, a.chat_id) for a in addresses.values() if a is not None})
        jobs = [
            row.session_key.removeprefix(SESSION_PREFIX)
            for row in rows
            if row.session_key.startswith(SESSION_PREFIX)
        ]

        def read(
            conn: sa.Connection,
        ) -> tuple[dict[tuple[str, str], Any], dict[tuple[str, str], Any], dict[str, str]]:
            people = (
                {(r.platform, r.chat_id): r for r in conn.execute(_PEOPLE, {"chats": chats})} if chats else {}
            )
            ids = [int(r.latest) for r in people.values()]
            names = {(r.platform, r.chat_id): r for r in conn.execute(_NAMES, {"ids": ids})} if ids else {}
            job_names = {r.id: r.name for r in conn.execute(_JOB_NAMES, {"ids": jobs})} if jobs else {}
            return people, names, job_names

        people, names, job_names = await self.storage.read(read)
        named: list[ChatRow] = []
        for row in rows:
            address = addresses[row.session_key]
            if address is None:
                job = job_names.get(row.session_key.removeprefix(SESSION_PREFIX))
                name = f"scheduled job: {job}" if job else None
                named.append(replace(row, name=name))
                continue
            found = (address.platform, address.chat_id)
            latest = names.get(found)
            count = people.get(found)
            named.append(replace(row, name=_chat_name(latest), people=int(count.people) if count else None))
        return named

    async def chat(self, session_key: str) -> ChatRow | None:
        """One chat's totals, or None when it has no session."""
        records = await self.store.sessions_for(session_key)
        if not records:
            return None
        rows = [
            UsageRow(r.id, r.input_tokens, r.cache_read_tokens, r.cache_write_tokens, r.output_tokens,
                     r.estimated_cost, r.uncached_cost)
            for r in records
        ]  # fmt: skip
        parameters = {"session_key": session_key}
        count = await self.storage.read(lambda conn: conn.execute(_REQUEST_COUNT, parameters).scalar_one())
        row = ChatRow(
            session_key=session_key,
            platform=records[0].platform,
            title=records[0].title,
            sessions=len(records),
            requests=int(count),
            usage=replace(total_row(rows), label=session_key),
            last_active=records[0].updated_at,
        )
        [named] = await self.named([row])
        return named

    async def turns(self, session_key: str, limit: int = TURN_LIMIT) -> list[Turn]:
        """The chat's latest ``limit`` requests, oldest first."""
        parameters = {"session_key": session_key, "limit": limit}
        rows = await self.storage.read(lambda conn: conn.execute(_TURNS, parameters).all())
        return [
            Turn(
                request_id=int(row.id),
                session_id=row.session_id,
                purpose=row.purpose,
                model=row.model,
                created_at=float(row.created_at),
                input_tokens=int(row.input_tokens),
                cache_read=int(row.cache_read_tokens),
                cache_write=int(row.cache_write),
                output_tokens=int(row.output_tokens),
                cost=float(row.estimated_cost),
            )
            for row in reversed(rows)
        ]


def _spent(row: Any) -> Spent:
    return Spent(row.purpose, int(row.requests), _row(row.purpose, row))


def _by_purpose(spent: Sequence[Spent]) -> list[UsageRow]:
    """Spending summed per purpose, labelled as ``herald insights`` does, the most expensive first."""
    purposes: list[PurposeUsage] = []
    for purpose in sorted({s.purpose for s in spent}):
        total = total_row([s.usage for s in spent if s.purpose == purpose])
        usage = Usage(total.input_tokens, total.output_tokens, total.cache_read, total.cache_write, 0)
        count = sum(s.requests for s in spent if s.purpose == purpose)
        purposes.append(PurposeUsage(purpose, count, usage, total.cost, total.uncached_cost))
    purposes.sort(key=lambda p: -p.cost)
    return [row_for_purpose(p) for p in purposes]


def _chat_name(latest: Any) -> str | None:
    """A group's title, or the person's name in a direct chat, from the chat's latest inbox row."""
    if latest is None:
        return None
    if latest.chat_type == "direct":
        return str(latest.user_name) if latest.user_name else None
    return str(latest.chat_title) if latest.chat_title else None


__all__ = ["ChatPage", "ChatRow", "ChatSort", "Overview", "Reports", "Turn"]
