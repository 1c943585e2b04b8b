"""What the console reads of spend limits and cache misses, through their own read APIs.

- :class:`BudgetSource` over :class:`~gateway.budgets.book.BudgetBook` (what ``/budget`` and ``herald
  budget`` read): every scope's spending today and this month against its limits, and one chat's. It
  reads the database, where every process of a cluster settles what it spent (Redis holds only the
  reservations of requests in flight, and a copy of the same sums for the gate), so each process's
  console shows the same figures.
- :class:`CacheMissSource` over the session store's cache-miss read API (what ``herald insights`` and
  ``/insights`` read): the misses of a period by cause, of one chat by cause, and on the requests a
  chart shows.

Each chat's misses and budget share in the chat list come from the same tables, joined into the list's
own query (:class:`gateway.console.reports.ChatList`), so the list can be sorted by them; the Budgets
page's scopes are sorted and paged the same way (:class:`gateway.console.reports.ScopeList`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.api import CacheMiss, MissTotal, Scope, SessionStore, Window
from agent.db import Storage
from gateway.budgets.book import BudgetBook, limit_in, split_scope
from gateway.budgets.forecast import Forecast, month_forecast
from gateway.budgets.limits import BOT, CHAT, CRON, FIELDS, chat_override_keys, listed_scope
from gateway.budgets.lines import ScopeStanding, limits_summary, scope_name, share_of, usd
from gateway.chats import job_session_key
from gateway.console.reports import ScopeList


@dataclass(frozen=True)
class BudgetLine:
    """One window of a scope: what it spent, its limit (None: none), when the window starts again."""

    window: str  # "day" or "month"
    spent_usd: float
    limit_usd: float | None
    resets_at: float | None
    forecast: Forecast | None = None  # a month with a limit: where it is heading at its pace so far

    @property
    def used(self) -> float | None:
        """Share of the limit spent (1.0 = at the limit); None without a limit."""
        return share_of(self.spent_usd, self.limit_usd)


@dataclass(frozen=True)
class ScopeBudget:
    """A scope (the bot, a chat, a person, a scheduled job) today and this month."""

    kind: str  # bot | chat | person | cron
    id: str  # the session key, platform:user_id or job id; "" for the bot
    today: BudgetLine
    month: BudgetLine

    @property
    def name(self) -> str:
        """As ``herald budget`` names it: "the bot", "chat telegram:group:-100123" ..."""
        return scope_name(self.kind, self.id)

    @property
    def chat_key(self) -> str | None:
        """The session key of the chat this scope spends for (its console page): a chat's, or a scheduled
        job's runs'; None for the bot and a person."""
        if self.kind == CHAT:
            return self.id
        return job_session_key(self.id) if self.kind == CRON else None

    @property
    def used(self) -> float | None:
        """The fuller of its limited windows' shares; None when neither has a limit."""
        shares = [line.used for line in (self.today, self.month) if line.used is not None]
        return max(shares) if shares else None

    @property
    def limited(self) -> bool:
        return self.used is not None

    @property
    def stopped_until(self) -> float | None:
        """When a scope at a limit may spend again (the latest end of its windows at their limit); None
        when it is under every limit."""
        ends = [line.resets_at for line in (self.today, self.month) if (line.used or 0.0) >= 1.0]
        return max((end for end in ends if end is not None), default=None)


@dataclass(frozen=True)
class Override:
    """One entry of ``budgets.overrides``, as configured."""

    key: str
    limits: str  # "$5.00/day, no monthly limit"


@dataclass(frozen=True)
class BudgetPage:
    scopes: list[ScopeBudget]  # this page's: the bot, then the fullest limited scopes, then by spend
    total: int
    page: int
    pages: int
    limits: str  # the configured limits in one line (as ``herald budget`` ends)
    overrides: list[Override]
    day_ends: float  # when today's limits start again
    month_ends: float


class BudgetSource:
    """Spend limits as the console shows them, from :class:`BudgetBook` (its clock, time zone and limits)
    and, for the Budgets page's thousands of scopes, the same spending sorted in ``storage``."""

    def __init__(self, book: BudgetBook, storage: Storage) -> None:
        self.book = book
        self.storage = storage
        self.scopes = ScopeList(book.settings)

    async def page(self, number: int) -> BudgetPage:
        """Every scope with spending today or this month (and the bot when it has a limit), a page of
        :data:`~gateway.console.reports.PAGE_SIZE` at a time (the bot above the first): scopes with a
        limit, the fullest first, then the others by what they spent this month (sorted and cut by the
        database: :class:`~gateway.console.reports.ScopeList`)."""
        now = self.book.clock()
        day, month = self.book.current_windows(now)
        listed = await self.scopes.read(self.storage, day, month, number)
        bot = self.book.scope(BOT, "")
        [(bot_day, bot_month)] = await self.book.of_scopes([bot], now)
        with_bot = bool(bot.limits) or bot_day.spent > 0 or bot_month.spent > 0
        scopes = [_scope(bot_day, bot_month, now)] if with_bot and listed.page == 1 else []
        for spent in listed.scopes:
            scope = self.book.scope(*split_scope(spent.scope))
            today = _line_in(scope, day, spent.day, now)
            this_month = _line_in(scope, month, spent.month, now)
            scopes.append(ScopeBudget(scope.kind, scope.id, today, this_month))
        settings = self.book.settings
        assert day.end is not None and month.end is not None  # calendar windows end
        return BudgetPage(
            scopes=scopes,
            total=listed.total + with_bot,
            page=listed.page,
            pages=listed.pages,
            limits=limits_summary(settings),
            overrides=[Override(key, _override_text(o.given())) for key, o in settings.overrides.items()],
            day_ends=day.end,
            month_ends=month.end,
        )

    async def bot_spend(self) -> ScopeBudget:
        """The whole bot's spending today and this month against its own limits (``budgets.bot``)."""
        now = self.book.clock()
        [(today, this_month)] = await self.book.of_scopes([self.book.scope(BOT, "")], now)
        return _scope(today, this_month, now)

    async def chat(self, session_key: str) -> ScopeBudget:
        """One chat's spending today and this month against its own limits (a scheduled job's runs: the
        job's)."""
        now = self.book.clock()
        scope = listed_scope(self.book.settings, session_key)
        [(today, this_month)] = await self.book.of_scopes([scope], now)
        return _scope(today, this_month, now)

    def overrides_of_chat(self, session_key: str) -> list[str]:
        """The keys of ``budgets.overrides`` that give the chat's limits, most particular first."""
        scope = listed_scope(self.book.settings, session_key)
        keys = chat_override_keys(session_key) if scope.kind == CHAT else [scope.key]
        return [key for key in keys if key in self.book.settings.overrides]


def _line_in(scope: Scope, window: Window, spent: float, now: float) -> BudgetLine:
    return _budget_line(window, spent, limit_in(scope, window), now)


def _budget_line(window: Window, spent: float, limit: float | None, now: float) -> BudgetLine:
    ahead = month_forecast(spent, limit, window.start, window.end, now) if window.kind == "month" else None
    return BudgetLine(window.kind, spent, limit, window.end, ahead)


def _scope(today: ScopeStanding, this_month: ScopeStanding, now: float) -> ScopeBudget:
    lines = [_budget_line(s.window, s.spent, s.limit, now) for s in (today, this_month)]
    return ScopeBudget(today.kind, today.id, *lines)


def _override_text(given: dict[str, float | None]) -> str:
    """ "$5.00/day; no monthly limit" (an explicit null lifts a limit)."""
    parts = [
        f"{usd(value)}/{FIELDS[name]}" if (value := given[name]) is not None else f"no {FIELDS[name]} limit"
        for name in FIELDS
        if name in given
    ]
    return "; ".join(parts) or "nothing changed"


@dataclass(frozen=True)
class MissSummary:
    """Cache misses of a period (or of one chat), by cause, as ``herald insights`` adds them up."""

    by_cause: list[MissTotal]  # the most expensive first

    @property
    def events(self) -> int:
        return sum(total.count for total in self.by_cause)

    @property
    def tokens(self) -> int:
        return sum(total.missed_tokens for total in self.by_cause)

    @property
    def usd(self) -> float:
        return sum(total.missed_usd for total in self.by_cause)


def cache_efficiency(read_tokens: int, missed_tokens: int) -> float | None:
    """Tokens read from the cache ÷ tokens it could have served: those read, and those a miss paid for in
    full (None before any cache read or miss)."""
    could = read_tokens + missed_tokens
    return read_tokens / could if could > 0 else None


class CacheMissSource:
    """Cache misses as the console shows them, from the store's read API (``herald insights``')."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def summary(self, since: float) -> MissSummary:
        """Every chat's misses since ``since``."""
        return MissSummary(await self.store.cache_misses.totals(since=since))

    async def of_chat(self, session_key: str) -> MissSummary:
        """One chat's misses, all time (what ``/insights`` in that chat adds up)."""
        return MissSummary(await self.store.cache_misses.totals(session_key=session_key))

    async def on_requests(self, session_key: str, request_ids: Sequence[int]) -> list[CacheMiss]:
        """The chat's misses on the requests given (those its chart shows), oldest first."""
        return await self.store.cache_misses.of_requests(session_key, request_ids)
