"""Where a month with a limit is heading at its pace so far (``herald budget``, ``/budget``, the
console): pure functions, on a virtual clock in a zone far from UTC."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from agent.api import month_window
from gateway.budgets.forecast import month_forecast
from gateway.budgets.lines import ScopeStanding, chat_report, forecast_text, standing_forecast, table

AUCKLAND = ZoneInfo("Pacific/Auckland")  # UTC+13 in March: its month starts on the 28th/29th in UTC


def at(day: int, hour: int = 0, month: int = 3) -> float:
    return dt.datetime(2026, month, day, hour, tzinfo=AUCKLAND).timestamp()


def standing(spent: float, limit: float | None, now: float) -> ScopeStanding:
    return ScopeStanding("bot", "", month_window(now, AUCKLAND), spent, limit)


def test_ten_days_at_a_dollar_a_day_reach_a_twenty_dollar_limit_on_the_twenty_first() -> None:
    now = at(11)  # 1 March 00:00 local + 10 days
    ahead = standing_forecast(standing(10.0, 20.0, now), now)
    assert ahead is not None and ahead.projected == pytest.approx(31.0)  # March has 31 days
    assert ahead.over and not ahead.reached
    assert forecast_text(ahead, AUCKLAND) == (
        "at this pace $31.00 this month, reaching its $20.00 limit on 21 March"
    )


def test_a_pace_within_the_limit_says_so_and_the_first_hours_count_as_a_day() -> None:
    slow = standing_forecast(standing(3.0, 100.0, at(11)), at(11))
    assert slow is not None and slow.reaches_at is None
    assert forecast_text(slow, AUCKLAND) == "at this pace $9.30 this month, within its $100.00 limit"
    early = month_forecast(1.0, 100.0, at(1), at(1, month=4), at(1, 1))  # a dollar in the first hour
    assert early is not None  # a dollar a day, not $24 a day:
    assert early.projected == pytest.approx(1.0 + (31 * 24 - 1) / 24)


def test_a_limit_already_reached_and_a_month_without_one() -> None:
    reached = standing_forecast(standing(25.0, 20.0, at(15)), at(15))
    assert reached is not None and reached.reached
    assert forecast_text(reached, AUCKLAND).endswith("; its $20.00 limit is reached")
    assert standing_forecast(standing(25.0, None, at(15)), at(15)) is None


def test_budget_reports_show_the_forecast_for_a_limited_month_only() -> None:
    now = at(11)
    day = ScopeStanding("bot", "", month_window(now, AUCKLAND), 1.0, None)
    month = standing(10.0, 20.0, now)
    chat_day = ScopeStanding("chat", "telegram:dm:7", day.window, 0.5, None)
    chat_month = ScopeStanding("chat", "telegram:dm:7", month.window, 2.0, None)
    report = chat_report([(day, month), (chat_day, chat_month)], AUCKLAND, exempt=False, now=now)
    lines = report.splitlines()  # the bot's month is limited, the chat's is not
    assert lines[1].endswith("; at this pace $31.00 this month, reaching its $20.00 limit on 21 March")
    assert lines[2] == "• This chat: $0.50 today, $2.00 this month"
    rows = table([(day, month), (chat_day, chat_month)], AUCKLAND, now)
    assert rows[1].endswith("reaching its $20.00 limit on 21 March") and "at this pace" not in rows[2]
