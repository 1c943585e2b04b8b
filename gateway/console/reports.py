"""What the console's pages show of spend and use, read with SQL aggregates (never row by row in Python).

The console must stay fast with tens of thousands of sessions and millions of requests, and on SQLite
every read waits its turn on the one database thread that turns write through: so each figure is one
aggregate statement, built once (at module level, or for the chat list once per console: its budget
column holds the configured limits), and the chat list is sorted and cut into pages by the database.
Sums and ratios reuse ``gateway.insights`` (:class:`~gateway.insights.UsageRow`), and cache misses the
agent's own aggregates, so the console and ``herald insights`` count alike.

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

from agent.api import MISSES_PER_CHAT, PurposeUsage, SessionStore, Usage
from agent.api import Window as SpendWindow
from agent.db import Storage, json_text, requests, sessions, spend_windows
from gateway.budgets.book import BudgetBook
from gateway.budgets.limits import BOT, CHAT, CRON, PERSON, KeyLimits, listed_limits
from gateway.chats import JOB_KEYS, chat_of_session_key, job_of_session_key, topics_prefix
from gateway.config import BudgetSettings
from gateway.insights import UsageRow, row_for_purpose, total_row
from gateway.ledger.inbox import PEOPLE_PER_CHAT
from gateway.tables import api_conversations, cron_jobs, inbox, outbox

DAYS = 30  # the overview's chart and its longest window
WINDOWS = (("today", 1), ("7 days", 7), ("30 days", DAYS))
PAGE_SIZE = 50
TURN_LIMIT = 200  # requests shown in one chat's chart (the latest)
REPLY_LIMIT = 20  # outbox items shown on one chat's page (the latest)


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
    MISSES = "misses"
    BUDGET = "budget"
    PEOPLE = "people"
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
    misses: int = 0  # cache-miss events, all time (as `herald insights` counts them)
    budget_used: float | None = None  # the share of its fullest chat limit spent (None: it has no limit)


@dataclass(frozen=True)
class ChatPage:
    rows: list[ChatRow]
    total: int  # chats in all
    page: int  # 1-based
    pages: int
    sort: ChatSort
    descending: bool


_TOTALS = [
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
]
_CHAT_COUNT = sa.select(sa.func.count(sa.distinct(sessions.c.session_key)))
_PERIODS: dict[str, sa.BindParameter[Any]] = {
    "day": sa.bindparam("day_period"),
    "month": sa.bindparam("month_period"),
}


def _limit_of(limits: KeyLimits, key: sa.ColumnElement[str], prefix: str = "") -> sa.ColumnElement[Any]:
    """Each chat's (person's, job's) limit as ``limits`` give it, decided in SQL as
    :func:`gateway.budgets.limits.listed_scope` decides it for one chat (tests/console/test_console_reports.py
    holds the two to each other); ``key`` is the session key (person, job) after ``prefix``. A key no rule
    can name (most of them) is told apart by one test, not one per rule."""
    none = sa.cast(sa.null(), sa.Double)  # typed: a CASE of bare NULLs is text to PostgreSQL
    default = none if limits.default is None else sa.literal(limits.default, sa.Double)
    cases = []
    for rule in limits.rules:
        names: list[sa.ColumnElement[bool]] = [key.in_([prefix + k for k in rule.keys])] if rule.keys else []
        if rule.topics_of is not None:
            topic = _like_escaped(prefix + rule.topics_of)
            one_topic = sa.and_(key.like(f"{topic}%", escape="\\"), ~key.like(f"{topic}%:%", escape="\\"))
            names.append(one_topic)
        cases.append((sa.or_(*names), none if rule.usd is None else sa.literal(rule.usd, sa.Double)))
    if not cases:
        return default
    named = [prefix + k for rule in limits.rules for k in rule.keys]
    maybe = [key.in_(named)] if named else []
    if any(rule.topics_of is not None for rule in limits.rules):
        maybe.append(key.like(f"{topics_prefix('%', '%')}%"))  # a topic of a group a rule names
    return sa.case((sa.or_(*maybe), sa.case(*cases, else_=default)), else_=default)


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _share(spent: sa.ColumnElement[Any], limit: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """What :attr:`gateway.budgets.lines.ScopeStanding.share` says: spent / limit, all of it at a limit
    of 0, nothing without one."""
    return sa.case((limit > 0, sa.func.coalesce(spent, 0.0) / limit), (limit == 0, 1.0), else_=sa.null())


def _fuller(shares: Sequence[sa.ColumnElement[Any]]) -> sa.ColumnElement[Any]:
    """The greater of the shares that are not NULL (NULL when none is)."""
    if not shares:
        return sa.null()
    if len(shares) == 1:
        return shares[0]
    day, month = shares
    return sa.case((day.is_(None), month), (month.is_(None), day), (day >= month, day), else_=month)


_SESSION_KEYS: sa.BindParameter[Any] = sa.bindparam("session_keys", expanding=True)


def _per_chat(aggregate: sa.Select[Any], name: str, narrow: bool) -> sa.Subquery:
    """``aggregate`` (grouped by session key) as a subquery: of the chats ``:session_keys`` (``narrow``:
    read through its index, for a page), or of every chat (to sort by it)."""
    if narrow:
        aggregate = aggregate.where(aggregate.selected_columns.session_key.in_(_SESSION_KEYS))
    return aggregate.subquery(name)


class ChatList:
    """The chat list's statements: each chat's sessions added up, with its latest title, its cache misses
    (:data:`agent.api.MISSES_PER_CHAT`), its people (:data:`gateway.ledger.inbox.PEOPLE_PER_CHAT`) and
    the share of its limits spent today and this month, the fuller of the two (``spend_windows``; a
    chat's own limits, a scheduled job's runs their job's: :func:`gateway.budgets.limits.listed_scope`).

    A page is read in two steps: :attr:`pages` sorts every chat by one column, reading only what that
    column needs, and cuts out the page's session keys; :attr:`rows` reads everything shown for those
    keys alone. Built once per console: the limits are part of the SQL."""

    def __init__(self, budgets: BudgetSettings) -> None:
        windows = [listed_limits(budgets, window) for window in ("day", "month")]
        self.limited = [limits for limits in windows if limits.chats.any or limits.jobs.any]  # of chats
        self.pages = {
            (sort, descending): self._page(sort, descending)
            for sort in ChatSort
            for descending in (False, True)
        }
        self.rows = self._rows()

    def _totals(self, *, narrow: bool, limits: bool) -> sa.Subquery:
        """The sessions added up per chat (``narrow``: of the chats ``:session_keys``); ``limits``: with the
        scope its spending counts in and its limit in each limited window, worked out once per chat."""
        key = sessions.c.session_key
        extra = []
        if limits:
            job = key.startswith(JOB_KEYS)
            for window in self.limited:
                limit = sa.case((job, _limit_of(window.jobs, key)), else_=_limit_of(window.chats, key))
                extra.append(limit.label(f"{window.window}_limit"))
            extra.append(sa.case((job, key), else_=sa.literal("chat:", sa.Text) + key).label("scope"))
        query = sa.select(*_TOTALS, *extra).group_by(key)
        return (query.where(key.in_(_SESSION_KEYS)) if narrow else query).subquery("totals")

    def _budget_used(self, totals: sa.Subquery, joined: sa.FromClause) -> tuple[sa.FromClause, Any]:
        """``joined`` with each limited window's spending, and the fuller share of the limits spent."""
        shares = []
        for window in self.limited:
            spent = spend_windows.alias(f"{window.window}_spent")
            found = sa.and_(spent.c.scope == totals.c.scope, spent.c.period == _PERIODS[window.window])
            joined = joined.outerjoin(spent, found)
            shares.append(_share(spent.c.spent, totals.c[f"{window.window}_limit"]))
        return joined, _fuller(shares)

    def _page(self, sort: ChatSort, descending: bool) -> sa.Select[Any]:
        """The session keys of one page of chats sorted by ``sort``, read from the sessions' totals and
        only what ``sort`` needs besides."""
        budget = sort is ChatSort.BUDGET and bool(self.limited)
        totals = self._totals(narrow=False, limits=budget)
        key = totals.c.session_key
        joined: sa.FromClause = totals
        column: sa.ColumnElement[Any] | None
        if sort is ChatSort.MISSES:
            misses = _per_chat(MISSES_PER_CHAT, "misses", narrow=False)
            joined = totals.outerjoin(misses, misses.c.session_key == key)
            column = sa.func.coalesce(misses.c.misses, 0)
        elif sort is ChatSort.PEOPLE:
            people = _per_chat(PEOPLE_PER_CHAT, "people", narrow=False)
            joined = totals.outerjoin(people, people.c.session_key == key)
            column = people.c.people
        elif sort is ChatSort.BUDGET:
            joined, column = self._budget_used(totals, totals) if budget else (totals, None)  # none: by key
        elif sort is ChatSort.TITLE:
            column = _latest_title(key)
        else:
            prompt = totals.c.input_tokens + totals.c.cache_read + totals.c.cache_write
            column = {
                ChatSort.PLATFORM: totals.c.platform,
                ChatSort.REQUESTS: totals.c.requests,
                ChatSort.SPEND: totals.c.cost,
                ChatSort.HIT: sa.case((prompt > 0, totals.c.cache_read * 1.0 / prompt), else_=0.0),
                ChatSort.ACTIVE: totals.c.last_active,
            }[sort]
        order = [] if column is None else [(column.desc() if descending else column.asc()).nulls_last()]
        return (
            sa.select(key)
            .select_from(joined)
            .order_by(*order, key)
            .limit(sa.bindparam("limit"))
            .offset(sa.bindparam("offset"))
        )

    def _rows(self) -> sa.Select[Any]:
        """Everything the list shows of the chats ``:session_keys``."""
        totals = self._totals(narrow=True, limits=bool(self.limited))
        key = totals.c.session_key
        misses = _per_chat(MISSES_PER_CHAT, "misses", narrow=True)
        people = _per_chat(PEOPLE_PER_CHAT, "people", narrow=True)
        joined: sa.FromClause = totals.outerjoin(misses, misses.c.session_key == key).outerjoin(
            people, people.c.session_key == key
        )
        joined, used = self._budget_used(totals, joined)
        return sa.select(
            *(totals.c[column.name] for column in _TOTALS),
            _latest_title(key).label("title"),
            sa.func.coalesce(misses.c.misses, 0).label("misses"),
            people.c.people,
            used.label("budget_used"),
        ).select_from(joined)

    def periods(self, day: SpendWindow, month: SpendWindow) -> dict[str, str]:
        """The parameters naming the windows a share is spent in (today and this month)."""
        return {"day_period": day.id, "month_period": month.id}


@dataclass(frozen=True)
class ScopeSpent:
    """What one scope spent today and this month (``scope``: ``chat:SESSION_KEY``, ``person:PLATFORM:ID``,
    ``cron:JOB_ID``)."""

    scope: str
    day: float
    month: float


@dataclass(frozen=True)
class ScopePage:
    scopes: list[ScopeSpent]
    total: int
    page: int
    pages: int


class ScopeList:
    """The Budgets page's statements: every scope but the bot that spent something today or this month,
    sorted by the fuller share of its limits (as ``gateway.console.sources.ScopeBudget.used``; those
    without a limit last), then by what it spent this month, and cut into pages by the database: a page
    reads its own rows whatever the number of scopes. Each scope's limits are decided in SQL as
    ``gateway.budgets.limits`` decides them for one (tests/console/test_console_reports.py holds the two
    to each other). Built once per console: the limits are part of the SQL."""

    def __init__(self, budgets: BudgetSettings) -> None:
        period = spend_windows.c.period
        spent = [
            sa.func.sum(sa.case((period == bind, spend_windows.c.spent), else_=0.0)).label(f"{window}_spent")
            for window, bind in _PERIODS.items()
        ]
        scope = spend_windows.c.scope
        windows = (listed_limits(budgets, "day"), listed_limits(budgets, "month"))
        limited = [window for window in windows if window.any]
        limits = [
            sa.case(
                (scope.startswith(f"{CHAT}:"), _limit_of(window.chats, scope, f"{CHAT}:")),
                (scope.startswith(f"{PERSON}:"), _limit_of(window.people, scope, f"{PERSON}:")),
                (scope.startswith(f"{CRON}:"), _limit_of(window.jobs, scope)),  # cron:JOB_ID: its runs' key
                else_=sa.null(),
            ).label(f"{window.window}_limit")
            for window in limited
        ]  # worked out once per scope, in the grouped query
        totals = (
            sa.select(scope, *spent, *limits)
            .where(period.in_(list(_PERIODS.values())), scope != BOT)
            .group_by(scope)
            .subquery("scopes")
        )
        shares = [_share(totals.c[f"{w.window}_spent"], totals.c[f"{w.window}_limit"]) for w in limited]
        order = [_fuller(shares).desc().nulls_last()] if shares else []
        self.page = (
            sa.select(totals.c.scope, totals.c.day_spent, totals.c.month_spent)
            .order_by(*order, totals.c.month_spent.desc(), totals.c.scope)
            .limit(sa.bindparam("limit"))
            .offset(sa.bindparam("offset"))
        )
        self.count = sa.select(sa.func.count(sa.distinct(scope))).where(
            period.in_(list(_PERIODS.values())), scope != BOT
        )  # through the index by period

    async def read(self, storage: Storage, day: SpendWindow, month: SpendWindow, number: int) -> ScopePage:
        """Page ``number`` (the last one if there are fewer) of the scopes' spending in ``day`` and
        ``month``."""
        periods = {"day_period": day.id, "month_period": month.id}

        def read(conn: sa.Connection) -> ScopePage:
            total = int(conn.execute(self.count, periods).scalar_one())
            pages = max(1, -(-total // PAGE_SIZE))
            chosen = min(max(1, number), pages)
            parameters = {**periods, "limit": PAGE_SIZE, "offset": (chosen - 1) * PAGE_SIZE}
            rows = conn.execute(self.page, parameters).all()
            found = [ScopeSpent(row.scope, float(row.day_spent), float(row.month_spent)) for row in rows]
            return ScopePage(found, total, chosen, pages)

        return await storage.read(read)


def _latest_title(session_key: sa.ColumnElement[str]) -> sa.ColumnElement[Any]:
    """The title of the chat's latest session."""
    latest = sessions.alias("latest")
    return (
        sa.select(latest.c.title)
        .where(latest.c.session_key == session_key)
        .order_by(latest.c.updated_at.desc())
        .limit(1)
        .scalar_subquery()
    )


# The chats on one page, named from what the platforms delivered (the inbox): each chat's latest row is
# found through the inbox's unique index (platform, chat_id, ...).
_LATEST_MESSAGE = (
    sa.select(inbox.c.platform, inbox.c.chat_id, sa.func.max(inbox.c.id).label("latest"))
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
_API_PEOPLE = sa.select(api_conversations.c.session_key, api_conversations.c.person).where(
    api_conversations.c.session_key.in_(sa.bindparam("keys", expanding=True))
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


@dataclass(frozen=True)
class Reply:
    """One outbox item of a chat (a reply, a voice note, an edit or deletion of a streamed message) and
    what became of it: its state in the outbox, and what the platform last said of it (``delivery``:
    sent, delivered, read or failed; None from a platform that reports nothing)."""

    id: int
    operation: str  # gateway.ledger.outbox.Operation
    text: str
    state: str  # gateway.ledger.outbox.OutboxState
    created_at: float
    sent_at: float | None
    delivery: str | None


def _replies(threaded: bool) -> sa.Select[Any]:
    """A chat's latest outbox items, newest first, read from the end of the ``outbox_by_chat`` index:
    the thread is matched by ``=`` or ``IS NULL`` (an index serves both, not ``IS NOT DISTINCT FROM``),
    and the order names the thread too, so it is the index's own order (no sort of the chat's items)."""
    thread_id = outbox.c.thread_id
    thread = thread_id == sa.bindparam("thread", type_=sa.Text) if threaded else thread_id.is_(None)
    chat = sa.and_(
        outbox.c.platform == sa.bindparam("platform", type_=sa.Text),
        outbox.c.chat_id == sa.bindparam("chat", type_=sa.Text),
    )
    return (
        sa.select(
            outbox.c.id, outbox.c.operation, outbox.c.text, outbox.c.state, outbox.c.created_at,
            outbox.c.sent_at, outbox.c.delivery,
        )
        .where(chat, thread)
        .order_by(outbox.c.thread_id.desc(), outbox.c.id.desc())
        .limit(sa.bindparam("limit", type_=sa.Integer))
    )  # fmt: skip


REPLIES = {threaded: _replies(threaded) for threaded in (False, True)}  # of a chat, of one thread of it


class Reports:
    """The console's figures, read from ``storage`` (the agent's tables and the gateway's)."""

    def __init__(self, storage: Storage, store: SessionStore, timezone: dt.tzinfo, book: BudgetBook) -> None:
        self.storage = storage
        self.store = store
        self.timezone = timezone
        self.book = book  # spend limits: their windows and the chat limits the chat list compares with
        self.chat_list = ChatList(book.settings)
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
        chat_list = self.chat_list
        statement = chat_list.pages[(sort, descending)]
        periods = chat_list.periods(*self.book.current_windows())

        def read(conn: sa.Connection) -> tuple[int, int, list[Any]]:
            total = int(conn.execute(_CHAT_COUNT).scalar_one())
            pages = max(1, -(-total // PAGE_SIZE))
            chosen = min(max(1, page), pages)
            parameters = {**periods, "limit": PAGE_SIZE, "offset": (chosen - 1) * PAGE_SIZE}
            keys = list(conn.execute(statement, parameters).scalars())
            rows = {r.session_key: r for r in conn.execute(chat_list.rows, {**periods, "session_keys": keys})}
            return total, chosen, [rows[key] for key in keys]

        total, chosen, rows = await self.storage.read(read)
        return ChatPage(
            rows=await self.named([_chat_row(row) for row in rows]),
            total=total,
            page=chosen,
            pages=max(1, -(-total // PAGE_SIZE)),
            sort=sort,
            descending=descending,
        )

    async def named(self, rows: Sequence[ChatRow]) -> list[ChatRow]:
        """``rows`` with each chat's name: from the latest message the platform delivered in it, the
        scheduled job's name, or the person an API conversation's key acts for (``api:alice``)."""
        addresses = {row.session_key: chat_of_session_key(row.session_key) for row in rows}
        chats = sorted({(a.platform, a.chat_id) for a in addresses.values() if a is not None})
        job_ids = {row.session_key: job_of_session_key(row.session_key) for row in rows}
        jobs = [job for job in job_ids.values() if job is not None]
        others = [
            row.session_key
            for row in rows
            if addresses[row.session_key] is None and job_ids[row.session_key] is None
        ]

        def read(conn: sa.Connection) -> tuple[dict[tuple[str, str], Any], dict[str, str], dict[str, str]]:
            latest = [int(r.latest) for r in conn.execute(_LATEST_MESSAGE, {"chats": chats})] if chats else []
            names = (
                {(r.platform, r.chat_id): r for r in conn.execute(_NAMES, {"ids": latest})} if latest else {}
            )
            job_names = {r.id: r.name for r in conn.execute(_JOB_NAMES, {"ids": jobs})} if jobs else {}
            api = conn.execute(_API_PEOPLE, {"keys": others}).all() if others else []
            people = {str(r.session_key): str(r.person) for r in api}
            return names, job_names, people

        names, job_names, people = await self.storage.read(read)
        named: list[ChatRow] = []
        for row in rows:
            address = addresses[row.session_key]
            if (job_id := job_ids[row.session_key]) is not None:
                job = job_names.get(job_id)
                named.append(replace(row, name=f"scheduled job: {job}" if job else None))
            elif address is None:
                named.append(replace(row, name=people.get(row.session_key)))
            else:
                named.append(replace(row, name=_chat_name(names.get((address.platform, address.chat_id)))))
        return named

    async def chat(self, session_key: str) -> ChatRow | None:
        """One chat's row of the chat list (named), or None when it has no session."""
        parameters = {**self.chat_list.periods(*self.book.current_windows()), "session_keys": [session_key]}
        row = await self.storage.read(lambda conn: conn.execute(self.chat_list.rows, parameters).first())
        if row is None:
            return None
        [named] = await self.named([_chat_row(row)])
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


    async def replies(self, session_key: str, limit: int = REPLY_LIMIT) -> list[Reply] | None:
        """The latest ``limit`` outbox items of the chat ``session_key`` names, newest first; None for a
        key of no chat (a scheduled job's runs, the API, the terminal: they post into no chat of theirs)."""
        address = chat_of_session_key(session_key)
        if address is None:
            return None
        statement = REPLIES[address.thread_id is not None]
        parameters = {"platform": address.platform, "chat": address.chat_id, "thread": address.thread_id,
                      "limit": limit}  # fmt: skip
        rows = await self.storage.read(lambda conn: conn.execute(statement, parameters).all())
        return [
            Reply(
                id=int(row.id),
                operation=row.operation,
                text=row.text,
                state=row.state,
                created_at=float(row.created_at),
                sent_at=None if row.sent_at is None else float(row.sent_at),
                delivery=row.delivery,
            )
            for row in rows
        ]


def _chat_row(row: Any) -> ChatRow:
    return ChatRow(
        session_key=row.session_key,
        platform=row.platform,
        title=row.title,
        sessions=int(row.sessions),
        requests=int(row.requests),
        usage=_row(row.session_key, row),
        last_active=float(row.last_active),
        people=None if row.people is None else int(row.people),
        misses=int(row.misses),
        budget_used=None if row.budget_used is None else float(row.budget_used),
    )


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


__all__ = ["ChatPage", "ChatRow", "ChatSort", "Overview", "Reply", "Reports", "Turn"]
