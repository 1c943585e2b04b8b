"""The read API of spend limits: every scope's spending and limit in the current day and month.

For ``/budget``, ``herald budget`` and the console. Reads the database (settled spending of every
process; requests in flight are not in it), and the limits from ``budgets:``.

- :meth:`BudgetBook.standing`: every scope with spending today or this month (and the bot when it has a
  limit), each window as a :class:`~gateway.budgets.lines.ScopeStanding` (kind, id, window, spent,
  limit, requests), bot first, then chats, people and jobs, the most spent today first.
- :meth:`BudgetBook.spending`: what :meth:`BudgetBook.standing` reads, as plain figures per scope key
  (the console sorts thousands of scopes by them, and makes rows only for the page it shows).
- :meth:`BudgetBook.chat_standing`: one chat, one person (and the bot), as (today, this month) pairs;
  :meth:`BudgetBook.of_scopes` the same for any scopes (the console's page of one chat).
- :meth:`BudgetBook.scope` gives a scope with its limits, worked out once per scope (the limits are
  fixed for the life of the process).
- :meth:`BudgetBook.owed_warnings`: the spend warnings of today and this month an admin could not be sent
  (no direct chat with the bot yet, or its platform away) and was not told since, as they read now.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.api import Scope, SpendLedger, SpendWarning, Window, day_window, month_window
from gateway.budgets.limits import BOT, CHAT, CRON, PERSON, bot_scope, chat_scope, job_scope, person_scope
from gateway.budgets.lines import ScopeStanding, warning_text
from gateway.config import BudgetSettings

KIND_ORDER = {BOT: 0, CHAT: 1, PERSON: 2, CRON: 3}
OWED = "owed:"  # a spend notice's audience: an admin a warning could not be sent to ("owed:telegram:42")
TOLD = "told:"  # and the same admin, told at their next message
REMEMBERED_SCOPES = 100_000  # scopes whose limits are kept worked out (then they are worked out afresh)


@dataclass(frozen=True)
class Spending:
    """What every scope spent today and this month: ``amounts`` by (scope key, window id) as (spent,
    requests); ``keys`` the scopes with spending in either window, and the bot when it has a limit."""

    day: Window
    month: Window
    amounts: dict[tuple[str, str], tuple[float, int]]
    keys: set[str]

    def of(self, key: str, window: Window) -> tuple[float, int]:
        return self.amounts.get((key, window.id), (0.0, 0))


@dataclass(frozen=True)
class OwedWarning:
    """A spend warning ``admin`` (``platform:user_id``) has not received yet, as it reads now."""

    admin: str
    scope: str
    period: str
    text: str


def split_scope(key: str) -> tuple[str, str]:
    """``chat:telegram:dm:42`` → ("chat", "telegram:dm:42"); ``bot`` → ("bot", "")."""
    kind, _, ident = key.partition(":")
    return kind, ident


class BudgetBook:
    def __init__(
        self,
        settings: BudgetSettings,
        ledger: SpendLedger,
        zone: dt.tzinfo,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.zone = zone
        self.clock = clock
        self._scopes: dict[tuple[str, str], Scope] = {}

    def scope(self, kind: str, ident: str) -> Scope:
        """The scope ``kind``/``ident`` with its configured limits."""
        found = self._scopes.get((kind, ident))
        if found is None:
            if len(self._scopes) >= REMEMBERED_SCOPES:
                self._scopes.clear()
            found = self._scopes[(kind, ident)] = self._new_scope(kind, ident)
        return found

    def _new_scope(self, kind: str, ident: str) -> Scope:
        if kind == CHAT:
            return chat_scope(self.settings, ident)
        if kind == PERSON:
            return person_scope(self.settings, ident)
        if kind == CRON:
            return job_scope(self.settings, ident)
        return bot_scope(self.settings)

    def current_windows(self, now: float | None = None) -> tuple[Window, Window]:
        """Today and this month in ``scheduler.timezone``."""
        moment = self.clock() if now is None else now
        return day_window(moment, self.zone), month_window(moment, self.zone)

    async def standing(self, now: float | None = None) -> list[ScopeStanding]:
        """Every scope with spending today or this month (and the bot when it has a limit), each with its
        day and its month: bot first, then chats, people and jobs, the most spent today first."""
        spending = await self.spending(now)
        day, month = spending.day, spending.month

        def order(key: str) -> tuple[int, float, str]:
            return KIND_ORDER.get(split_scope(key)[0], 9), -spending.of(key, day)[0], key

        found: list[ScopeStanding] = []
        for key in sorted(spending.keys, key=order):
            kind, ident = split_scope(key)
            scope = self.scope(kind, ident)
            for window in (day, month):
                amount, requests = spending.of(key, window)
                found.append(ScopeStanding(kind, ident, window, amount, limit_in(scope, window), requests))
        return found

    async def spending(self, now: float | None = None) -> Spending:
        """What every scope spent today and this month (one read of the database)."""
        day, month = self.current_windows(now)
        rows = await self.ledger.in_periods([day.id, month.id])
        keys = {row.scope for row in rows}
        if bot_scope(self.settings).limits:
            keys.add(BOT)
        amounts = {(row.scope, row.period): (row.spent, row.requests) for row in rows}
        return Spending(day, month, amounts, keys)

    async def chat_standing(
        self, session_key: str, person: str, *, with_bot: bool, now: float | None = None
    ) -> list[tuple[ScopeStanding, ScopeStanding]]:
        """``/budget``: the chat, the person and (``with_bot``) the bot, each as (today, this month)."""
        scopes = [chat_scope(self.settings, session_key), person_scope(self.settings, person)]
        if with_bot:
            scopes.append(bot_scope(self.settings))
        return await self.of_scopes(scopes, now)

    async def owed_warnings(self, admin: str | None = None) -> list[OwedWarning]:
        """The warnings of today's and this month's windows that ``admin`` (None: any admin) is owed."""
        now = self.clock()
        day, month = self.current_windows(now)
        periods = [day.id, month.id]
        prefix = OWED if admin is None else f"{OWED}{admin}"
        noted = await self.ledger.notices(periods, prefix)
        owed = [n for n in noted if admin is None or n.audience == prefix]  # not telegram:12 for telegram:1
        if not owed:
            return []
        told = {(n.scope, n.period, n.audience) for n in await self.ledger.notices(periods, TOLD)}
        found = []
        for notice in owed:
            who = notice.audience.removeprefix(OWED)
            if (notice.scope, notice.period, f"{TOLD}{who}") in told:
                continue
            scope = self.scope(*split_scope(notice.scope))
            [(today, this_month)] = await self.of_scopes([scope], now)
            standing = today if notice.period == day.id else this_month
            if standing.limit is None:  # the limit was lifted since
                continue
            warning = SpendWarning(scope, standing.window, standing.limit, standing.spent)
            found.append(OwedWarning(who, notice.scope, notice.period, warning_text(warning, self.zone)))
        return found

    async def of_scopes(
        self, scopes: Sequence[Scope], now: float | None = None
    ) -> list[tuple[ScopeStanding, ScopeStanding]]:
        """Each of ``scopes`` (:meth:`scope` gives one) as (today, this month)."""
        day, month = self.current_windows(now)
        spent = await self.ledger.spent([(s.key, w.id) for s in scopes for w in (day, month)])
        return [
            (
                ScopeStanding(s.kind, s.id, day, spent.get((s.key, day.id), 0.0), limit_in(s, day)),
                ScopeStanding(s.kind, s.id, month, spent.get((s.key, month.id), 0.0), limit_in(s, month)),
            )
            for s in scopes
        ]


def limit_in(scope: Scope, window: Window) -> float | None:
    """The scope's limit in ``window``'s kind (None: none)."""
    return next((limit.usd for limit in scope.limits if limit.window == window.kind), None)


def pairs(standings: Sequence[ScopeStanding]) -> list[tuple[ScopeStanding, ScopeStanding]]:
    """:meth:`BudgetBook.standing`'s rows as (today, this month) per scope."""
    return [(standings[index], standings[index + 1]) for index in range(0, len(standings) - 1, 2)]

