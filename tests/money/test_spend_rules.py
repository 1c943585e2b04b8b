"""Spend limits, pure: windows, the admission rule, estimates, which limits apply, what people read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pytest

from agent.model.messages import Message
from agent.model.provider import ProviderRequest
from agent.models import lookup_model
from agent.prompt import SystemPrompt
from agent.spending.charge import Limit, Scope
from agent.spending.estimate import INPUT_MARGIN, MIN_ANSWER_TOKENS, request_price
from agent.spending.gate import Refusal, SpendWarning
from agent.spending.rules import crossed, grant
from agent.spending.windows import day_window, month_window, run_window
from gateway.budgets.limits import chat_scope, default_charge, job_scope, person_scope, turn_charge
from gateway.budgets.lines import refusal_line, usd, warning_text
from gateway.config import BudgetSettings
from gateway.timezones import resolve_timezone

BERLIN = resolve_timezone("Europe/Berlin")
AUCKLAND = resolve_timezone("Pacific/Auckland")


def at(year: int, month: int, day: int, hour: int, minute: int = 0, zone: dt.tzinfo = BERLIN) -> float:
    return dt.datetime(year, month, day, hour, minute, tzinfo=zone).timestamp()


def test_a_day_runs_from_local_midnight_to_local_midnight() -> None:
    late = day_window(at(2026, 3, 14, 23, 59), BERLIN)
    assert late.id == "day:2026-03-14"
    assert late.start == at(2026, 3, 14, 0) and late.end == at(2026, 3, 15, 0)
    assert day_window(at(2026, 3, 15, 0, 0), BERLIN).id == "day:2026-03-15"
    # 23:30 UTC is already tomorrow in Berlin, and far into tomorrow in Auckland
    utc_evening = dt.datetime(2026, 3, 14, 23, 30, tzinfo=dt.UTC).timestamp()
    assert day_window(utc_evening, BERLIN).id == "day:2026-03-15"
    assert day_window(utc_evening, AUCKLAND).id == "day:2026-03-15"
    assert day_window(utc_evening, dt.UTC).id == "day:2026-03-14"


def test_a_day_lasts_23_or_25_hours_when_the_clocks_change() -> None:
    spring = day_window(at(2026, 3, 29, 12), BERLIN)  # summer time starts at 02:00
    autumn = day_window(at(2026, 10, 25, 12), BERLIN)  # and ends at 03:00
    assert spring.end is not None and spring.start is not None
    assert autumn.end is not None and autumn.start is not None
    assert spring.end - spring.start == 23 * 3600
    assert autumn.end - autumn.start == 25 * 3600
    assert dt.datetime.fromtimestamp(spring.end, BERLIN).hour == 0


def test_a_month_is_the_calendar_month_and_the_year_rolls_over() -> None:
    december = month_window(at(2026, 12, 31, 23, 59), BERLIN)
    assert december.id == "month:2026-12"
    assert december.start == at(2026, 12, 1, 0) and december.end == at(2027, 1, 1, 0)
    assert month_window(at(2027, 1, 1, 0), BERLIN).id == "month:2027-01"
    assert run_window("ab12").id == "run:ab12" and run_window("ab12").end is None


@pytest.mark.parametrize(
    ("spent", "reserved", "least", "most", "limit", "expected"),
    [
        (0.0, 0.0, 0.5, 0.5, 2.0, 0.5),
        (1.5, 0.0, 0.5, 0.5, 2.0, 0.5),  # exactly reaches the limit
        (1.5, 0.1, 0.5, 0.5, 2.0, None),  # requests in flight count
        (1.99, 0.0, 0.02, 0.02, 2.0, None),  # would cross it
        (1.0, 0.5, 0.1, 3.0, 2.0, 0.5),  # it may cost what is left after those in flight, no more
        (1.0, 0.95, 0.1, 3.0, 2.0, None),  # what is left does not pay its least
        (2.0, 0.0, 0.0, 0.0, 2.0, None),  # nothing left: a turn does not start
        (1.99, 0.0, 0.0, 0.0, 2.0, 0.0),  # something left: it starts, its first request decides
        (0.0, 0.0, 0.0, 0.0, 0.0, None),  # a limit of 0 stops everything
        (2.5, 0.0, 0.0, 0.0, 2.0, None),  # overshot (a request's input sized wrong): nothing left
    ],
)
def test_a_request_gets_what_is_left_up_to_what_it_can_cost_if_that_pays_its_least(
    spent: float, reserved: float, least: float, most: float, limit: float, expected: float | None
) -> None:
    granted = grant(spent, reserved, least, most, limit)
    assert granted == (None if expected is None else pytest.approx(expected))


def test_a_warning_threshold_is_crossed_once() -> None:
    assert crossed(1.5, 1.7, 1.6) and crossed(1.5, 1.6, 1.6)
    assert not crossed(1.6, 1.7, 1.6)  # already over it before
    assert not crossed(1.0, 1.5, 1.6)


def _request(messages: Sequence[Message], *, max_tokens: int = 4096, ttl: str = "5m") -> ProviderRequest:
    return ProviderRequest(
        session_id="s",
        system=SystemPrompt(stable="x" * 4000, context="", volatile=""),
        tools=(),
        messages=messages,
        max_tokens=max_tokens,
        tail_ttl="1h" if ttl == "1h" else "5m",
    )


def test_a_price_counts_what_the_cache_holds_as_a_read_the_rest_as_a_write_and_the_whole_max_tokens() -> None:
    sonnet = lookup_model("claude-sonnet-4-6")  # $3 in, $15 out; read $0.30, 5m write $3.75, 1h $6; min 2048
    request = _request([Message(role="user", content="y" * 8000)], max_tokens=100)
    size = 3000 * INPUT_MARGIN  # about four characters a token, and the margin
    fresh = request_price(request, sonnet, cached_tokens=0)
    assert fresh.input == pytest.approx(size * 3.75 / 1e6, rel=0.02)
    assert fresh.most == pytest.approx((size * 3.75 + 100 * 15) / 1e6, rel=0.02)
    warm = request_price(request, sonnet, cached_tokens=2500)
    assert warm.most == pytest.approx((2500 * 0.30 + (size - 2500) * 3.75 + 100 * 15) / 1e6, rel=0.02)
    hour = request_price(_request(request.messages, max_tokens=100, ttl="1h"), sonnet, cached_tokens=2500)
    assert hour.most == pytest.approx((2500 * 0.30 + (size - 2500) * 6.0 + 100 * 15) / 1e6, rel=0.02)
    large = request_price(_request(request.messages, max_tokens=64_000), sonnet, cached_tokens=0)
    assert large.most == pytest.approx((size * 3.75 + 64_000 * 15) / 1e6, rel=0.02)  # the whole cap
    assert large.least == pytest.approx((size * 3.75 + MIN_ANSWER_TOKENS * 15) / 1e6, rel=0.02)
    too_short_to_be_cached = request_price(request, sonnet, cached_tokens=1000)
    assert too_short_to_be_cached == fresh


def test_a_price_lowers_max_tokens_to_what_an_amount_pays() -> None:
    sonnet = lookup_model("claude-sonnet-4-6")
    price = request_price(_request([Message(role="user", content="y" * 8000)], max_tokens=4000), sonnet,
                          cached_tokens=0)  # fmt: skip
    assert price.tokens_for(price.most) == 4000 and price.tokens_for(price.most * 2) == 4000
    assert price.tokens_for(price.input + 1000 * 15 / 1e6) == 1000
    assert price.tokens_for(price.input / 2) == 0
    assert price.input + price.tokens_for(0.02) * 15 / 1e6 <= 0.02  # never more than the amount


def test_a_request_under_the_minimum_cacheable_size_is_priced_as_plain_input() -> None:
    sonnet = lookup_model("claude-sonnet-4-6")
    short = ProviderRequest(
        session_id="s", system=SystemPrompt(stable="x" * 1600, context="", volatile=""), tools=(),
        messages=[Message(role="user", content="hi")], max_tokens=10,
    )  # fmt: skip
    plain = (400 * INPUT_MARGIN * 3.0 + 10 * 15) / 1e6
    assert request_price(short, sonnet, cached_tokens=500).most == pytest.approx(plain, rel=0.02)


def _usd(scope: Scope) -> dict[str, float]:
    return {limit.window: limit.usd for limit in scope.limits}


def test_overrides_replace_a_scopes_limits_from_the_most_particular_key() -> None:
    settings = BudgetSettings.model_validate(
        {
            "chat": {"daily_usd": 2, "monthly_usd": 20},
            "person": {"monthly_usd": 10},
            "cron": {"per_run_usd": 0.1},
            "overrides": {
                "telegram:-100123": {"daily_usd": 5},
                "telegram:-100123:7": {"daily_usd": 1, "monthly_usd": None},  # null lifts the limit
                "telegram:42": {"monthly_usd": 3},
                "cron:ab12cd": {"per_run_usd": 0.5},
            },
        }
    )
    assert _usd(chat_scope(settings, "telegram:group:-100123")) == {"day": 5.0, "month": 20.0}
    assert _usd(chat_scope(settings, "telegram:group:-100123:topic:7")) == {"day": 1.0}
    assert _usd(chat_scope(settings, "telegram:group:-100999")) == {"day": 2.0, "month": 20.0}
    assert _usd(person_scope(settings, "telegram:42")) == {"month": 3.0}
    assert _usd(chat_scope(settings, "telegram:dm:42")) == {"day": 2.0, "month": 3.0}  # platform:id: both
    assert _usd(person_scope(settings, "discord:42")) == {"month": 10.0}
    assert _usd(job_scope(settings, "ab12cd", "r1")) == {"run": 0.5}
    assert _usd(job_scope(settings, "zz99zz", "r1")) == {"run": 0.1}
    assert default_charge(settings).scopes[0].limits == ()


def test_a_turn_is_charged_to_the_bot_the_chat_and_the_person_and_admins_may_be_exempt() -> None:
    settings = BudgetSettings.model_validate({"bot": {"daily_usd": 20}, "exempt_admins": True})
    charge = turn_charge(settings, "telegram:group:-5", "telegram:42", is_admin=False)
    assert [scope.key for scope in charge.scopes] == ["bot", "chat:telegram:group:-5", "person:telegram:42"]
    assert not charge.exempt
    assert turn_charge(settings, "telegram:dm:1", "telegram:1", is_admin=True).exempt
    strict = BudgetSettings.model_validate({"exempt_admins": False})
    assert not turn_charge(strict, "telegram:dm:1", "telegram:1", is_admin=True).exempt


def test_bad_override_keys_are_refused_in_one_sentence() -> None:
    with pytest.raises(ValueError, match="is not platform:chat_id, platform:user_id or cron:JOB_ID"):
        BudgetSettings.model_validate({"overrides": {"my group": {"daily_usd": 1}}})
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        BudgetSettings.model_validate({"chat": {"daily_usd": -1}})


def _refusal(scope: Scope, window_at: float, kind: str, limit: float) -> Refusal:
    window = {"day": day_window, "month": month_window}[kind](window_at, BERLIN)
    return Refusal(scope, window, limit, limit, 0.0)


def test_the_refusal_line_names_the_limit_and_when_it_resets_in_the_configured_zone() -> None:
    chat = Scope("chat", "telegram:group:-5", (Limit("day", 2.0),))
    person = Scope("person", "telegram:42", (Limit("month", 10.0),))
    now = at(2026, 3, 14, 18)
    assert refusal_line(_refusal(chat, now, "day", 2.0), BERLIN) == (
        "This chat has used its $2.00 for today; it resets at 00:00 Europe/Berlin."
    )
    assert refusal_line(_refusal(person, now, "month", 10.0), BERLIN) == (
        "You have used your $10.00 for this month; it resets on 1 April at 00:00 Europe/Berlin."
    )
    job = Scope("cron", "ab12cd", (Limit("run", 0.015),), run="r1")
    assert refusal_line(Refusal(job, run_window("r1"), 0.015, 0.016, 0.0), BERLIN) == (
        "This scheduled job has used its $0.015 for this run."
    )


def test_amounts_show_what_a_small_limit_is() -> None:
    assert [usd(2), usd(0.015), usd(1234.5), usd(0)] == ["$2.00", "$0.015", "$1,234.50", "$0.00"]
    assert [usd(0.00001), usd(0.00012)] == ["$0.00", "$0.0001"]


def test_a_refusal_says_whether_the_limit_is_used_up_or_this_request_would_cross_it() -> None:
    bot = Scope("bot", "", (Limit("day", 0.05),))
    today = day_window(at(2026, 3, 14, 18), BERLIN)
    crossing = Refusal(bot, today, 0.05, 0.0155, 0.0, needed=0.04)
    assert not crossing.used_up and crossing.left == pytest.approx(0.0345)
    assert refusal_line(crossing, BERLIN) == (
        "This bot has spent $0.0155 of its $0.05 for today; this request needs at least $0.04, more than "
        "the $0.0345 left, so it was not sent. The limit resets at 00:00 Europe/Berlin."
    )
    held = Refusal(bot, today, 0.05, 0.03, 0.02, needed=0.01)  # requests in flight hold the rest
    assert not held.used_up and refusal_line(held, BERLIN) == (
        "This bot has spent $0.03 of its $0.05 for today, and requests still running hold $0.02; nothing is "
        "left until they finish. The limit resets at 00:00 Europe/Berlin."
    )
    assert refusal_line(Refusal(bot, today, 0.05, 0.0512, 0.0, needed=0.01), BERLIN) == (
        "This bot has used its $0.05 for today; it resets at 00:00 Europe/Berlin."
    )


def test_the_admins_warning_names_the_scope_the_share_and_the_reset() -> None:
    chat = Scope("chat", "telegram:group:-5", (Limit("day", 2.0),))
    warning = SpendWarning(chat, day_window(at(2026, 3, 14, 18), BERLIN), 2.0, 1.62)
    assert warning_text(warning, BERLIN) == (
        "💸 Spend warning: Chat telegram:group:-5 has spent $1.62 of its $2.00 for today (81%); "
        "it resets at 00:00 Europe/Berlin."
    )
