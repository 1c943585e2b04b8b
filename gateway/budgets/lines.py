"""What people are told about spend limits, as pure functions of the facts (no I/O).

Amounts are USD with two decimals, or as many (up to four) as a small limit needs ("$0.015"); times are
local to ``scheduler.timezone`` and name it ("00:00 Europe/Berlin").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from agent.api import Refusal, Scope, SpendWarning, Window, zone_name
from gateway.budgets.forecast import Forecast, month_forecast
from gateway.budgets.limits import BOT, CHAT, CRON, FIELDS, PERSON
from gateway.config import BudgetSettings

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")  # fmt: skip
FOR_WINDOW = {"day": "for today", "month": "for this month", "run": "for this run"}


def usd(amount: float) -> str:
    """``$2.00``; ``$0.015`` when two decimals would hide what the amount is."""
    text = f"{amount:,.2f}"
    if abs(float(text.replace(",", "")) - amount) > 1e-9:
        finer = f"{amount:,.4f}".rstrip("0")
        text = finer if not finer.endswith(".") else text  # under $0.00005: "$0.00", never "$0."
    return f"${text}"


def rough_usd(amount: float) -> str:
    """A projection, to the cent (``$7.37``, not ``$7.3693``); finer only below ten cents."""
    return usd(round(amount, 2) if amount >= 0.1 else amount)


def on_day(timestamp: float, zone: dt.tzinfo) -> str:
    """"on 1 April": the local day ``timestamp`` falls on, as every budget line names a day."""
    local = dt.datetime.fromtimestamp(timestamp, zone)
    return f"on {local.day} {MONTHS[local.month - 1]}"


def resets(window: Window, zone: dt.tzinfo) -> str | None:
    """When ``window``'s limit starts again: "at 00:00 Europe/Berlin" (the next day) or "on 1 April at
    00:00 Europe/Berlin"; None for a run."""
    if window.end is None or window.start is None:
        return None
    end = dt.datetime.fromtimestamp(window.end, zone)
    clock = f"{end:%H:%M} {zone_name(zone)}"
    if window.kind == "day":
        return f"at {clock}"
    return f"{on_day(window.end, zone)} at {clock}"


def _subject(scope: Scope) -> tuple[str, str]:
    """How a refusal names the scope, and its possessive: ("This chat has", "its") ..."""
    if scope.kind == PERSON:
        return "You have", "your"
    if scope.kind == CHAT:
        return "This chat has", "its"
    if scope.kind == CRON:
        return "This scheduled job has", "its"
    return "This bot has", "its"


def refusal_line(refusal: Refusal, zone: dt.tzinfo) -> str:
    """The line a chat gets when a limit stops it, saying what happened: the limit is used up ("This chat
    has used its $2.00 for today; it resets at 00:00 Europe/Berlin."), or what is left of it is less than
    this request needs at least ("This bot has spent $0.0155 of its $0.05 for today; this request needs
    at least $0.04, more than the $0.0345 left, so it was not sent. ..."), or requests still running hold
    the rest."""
    subject, its = _subject(refusal.scope)
    window = FOR_WINDOW[refusal.window.kind]
    if refusal.limit <= 0:  # nothing was ever allowed: nothing "resets"
        return f"{subject} a spend limit of {usd(0)} {window}: no model requests."
    when = resets(refusal.window, zone)
    if refusal.used_up:
        line = f"{subject} used {its} {usd(refusal.limit)} {window}"
        return f"{line}; it resets {when}." if when else f"{line}."
    line = f"{subject} spent {usd(refusal.spent)} of {its} {usd(refusal.limit)} {window}"
    if refusal.reserved > 0:
        line += f", and requests still running hold {usd(refusal.reserved)}"
    if refusal.left <= 0:
        line += "; nothing is left until they finish"
    else:
        line += (
            f"; this request needs at least {usd(refusal.needed)}, more than the {usd(refusal.left)} "
            "left, so it was not sent"
        )
    return f"{line}. The limit resets {when}." if when else f"{line}."


def scope_name(kind: str, ident: str) -> str:
    """A scope as an operator reads it: "the bot", "chat telegram:group:-100123", "person telegram:42",
    "scheduled job ab12cd"."""
    if kind == BOT:
        return "the bot"
    if kind == CRON:
        return f"scheduled job {ident}"
    return f"{kind} {ident}"


def warning_text(warning: SpendWarning, zone: dt.tzinfo) -> str:
    """The admins' direct message when a scope's window reaches ``budgets.warn_at`` of its limit."""
    scope, window = warning.scope, warning.window
    share = warning.spent / warning.limit if warning.limit else 1.0
    name = scope_name(scope.kind, scope.id)
    text = (
        f"💸 Spend warning: {name[0].upper()}{name[1:]} has spent {usd(warning.spent)} of its "
        f"{usd(warning.limit)} {FOR_WINDOW[window.kind]} ({share:.0%})"
    )
    when = resets(window, zone)
    return f"{text}; it resets {when}." if when else f"{text}."


@dataclass(frozen=True)
class ScopeStanding:
    """One scope's spending in one window, with its limit (None: no limit): the read API's row."""

    kind: str  # bot | chat | person | cron
    id: str  # the session key, platform:user_id or job id; "" for the bot
    window: Window
    spent: float
    limit: float | None
    requests: int = 0

    @property
    def share(self) -> float | None:
        """How much of the limit is spent (1.0 = all); None without a limit."""
        return share_of(self.spent, self.limit)


def share_of(spent: float, limit: float | None) -> float | None:
    """How much of ``limit`` is spent (1.0 = all; all of it at a limit of 0); None without a limit."""
    if limit is None:
        return None
    return spent / limit if limit else 1.0


def amount_of(standing: ScopeStanding) -> str:
    """"$0.42 of $2.00 (21%)", or "$0.42" without a limit."""
    if standing.limit is None:
        return usd(standing.spent)
    share = standing.share or 0.0
    return f"{usd(standing.spent)} of {usd(standing.limit)} ({share:.0%})"


CHAT_LABELS = {CHAT: "This chat", PERSON: "You", BOT: "The bot", CRON: "This job"}


def chat_report(
    rows: Sequence[tuple[ScopeStanding, ScopeStanding]], zone: dt.tzinfo, *, exempt: bool, now: float
) -> str:
    """``/budget``: per scope (this chat, you, the bot) its day and month, where a month with a limit is
    heading at its pace so far, and when the limits start again."""
    if not rows:
        return "No spending yet."
    lines = [f"Spending (days and months in {zone_name(zone)}):"]
    for day, month in rows:
        label = CHAT_LABELS.get(day.kind, day.kind)
        line = f"• {label}: {amount_of(day)} today, {amount_of(month)} this month"
        if (ahead := standing_forecast(month, now)) is not None:
            line += f"; {forecast_text(ahead, zone)}"
        lines.append(line)
    day_window, month_window = rows[0][0].window, rows[0][1].window
    lines.append(f"Days start again {resets(day_window, zone)}; the month {resets(month_window, zone)}.")
    if exempt:
        lines.append("You are an admin: your messages are never refused (budgets.exempt_admins).")
    return "\n".join(lines)


def table(rows: Sequence[tuple[ScopeStanding, ScopeStanding]], zone: dt.tzinfo, now: float) -> list[str]:
    """``herald budget``: one line per scope with its day, its month and, for a month with a limit,
    where it is heading at its pace so far, aligned."""
    def ahead(month: ScopeStanding) -> str:
        found = standing_forecast(month, now)
        return forecast_text(found, zone) if found is not None else ""

    cells = [("scope", "today", "this month", "")] + [
        (scope_name(day.kind, day.id), amount_of(day), amount_of(month), ahead(month)) for day, month in rows
    ]
    widths = [max(len(row[column]) for row in cells) for column in range(3)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, [*widths, 0], strict=True)).rstrip()
            for row in cells]  # fmt: skip


def standing_forecast(month: ScopeStanding, now: float) -> Forecast | None:
    """Where a scope's month is heading at its pace so far (None without a monthly limit)."""
    window = month.window
    if month.limit is None:
        return None
    return month_forecast(month.spent, month.limit, window.start, window.end, now)


def forecast_text(forecast: Forecast, zone: dt.tzinfo) -> str:
    """"at this pace $12.40 this month, reaching its $10.00 limit on 24 March", "... within its $10.00
    limit" or "...; its $10.00 limit is reached"."""
    text = f"at this pace {rough_usd(forecast.projected)} this month"
    if forecast.limit is None:
        return text
    if forecast.reached:
        return f"{text}; its {usd(forecast.limit)} limit is reached"
    if forecast.reaches_at is None:
        return f"{text}, within its {usd(forecast.limit)} limit"
    return f"{text}, reaching its {usd(forecast.limit)} limit {on_day(forecast.reaches_at, zone)}"


def limits_summary(settings: BudgetSettings) -> str:
    """The configured limits in one line, for ``herald budget``."""
    parts = []
    for label, section in (("the bot", settings.bot), ("each chat", settings.chat),
                           ("each person", settings.person), ("each job", settings.cron)):  # fmt: skip
        given = section.model_dump().items()
        amounts = [f"{usd(value)}/{FIELDS[name]}" for name, value in given if value is not None]
        if amounts:
            parts.append(f"{label} {', '.join(amounts)}")
    if settings.overrides:
        parts.append(f"{len(settings.overrides)} override(s)")
    if not parts:
        return "No limits are set (budgets: in config.yaml); spending is counted all the same."
    extras = []
    if settings.warn_at is not None:
        extras.append(f"admins are warned at {settings.warn_at:.0%}")
    if settings.exempt_admins:
        extras.append("admins are exempt")
    return f"Limits: {'; '.join(parts)}." + (f" {'; '.join(extras).capitalize()}." if extras else "")
