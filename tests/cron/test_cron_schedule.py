"""Schedule syntax, pure: no scheduler, no clock (``now`` is given)."""

from __future__ import annotations

import datetime as dt

import pytest

from gateway.cron.jobs import parse_target
from gateway.cron.schedule import (
    ScheduleError,
    check_future,
    parse_schedule,
    standard_weekdays,
)
from gateway.timezones import resolve_timezone

BERLIN = resolve_timezone("Europe/Berlin")
NOW = dt.datetime(2026, 5, 1, 10, 0, tzinfo=BERLIN)  # a Friday


def first(text: str, now: dt.datetime = NOW) -> dt.datetime | None:
    return parse_schedule(text, BERLIN, now).first_run(BERLIN, now)


def test_cron_fields_use_standard_weekdays_in_the_scheduler_time_zone() -> None:
    weekdays = parse_schedule("0 8 * * 1-5", BERLIN, NOW)
    assert weekdays.kind == "cron" and weekdays.text == "0 8 * * 1-5" and weekdays.repeats
    assert first("0 8 * * 1-5") == dt.datetime(2026, 5, 4, 8, 0, tzinfo=BERLIN)  # Monday, not Saturday
    assert first("0 8 * * 0") == dt.datetime(2026, 5, 3, 8, 0, tzinfo=BERLIN)  # 0 is Sunday
    assert first("0 8 * * 7") == first("0 8 * * sun")
    quarter = dt.datetime(2026, 5, 1, 10, 15, tzinfo=BERLIN)
    assert first("*/15 * * * *", NOW + dt.timedelta(minutes=1)) == quarter
    assert first("30 6 1 * *") == dt.datetime(2026, 6, 1, 6, 30, tzinfo=BERLIN)


def test_a_cron_time_is_wall_clock_time_across_a_dst_change() -> None:
    before = dt.datetime(2026, 10, 24, 7, 0, tzinfo=BERLIN)  # summer time ends on Sunday the 25th
    daily = parse_schedule("0 8 * * *", BERLIN, before)
    trigger = daily.trigger(BERLIN)
    saturday = trigger.get_next_fire_time(None, before)
    sunday = trigger.get_next_fire_time(saturday, saturday)
    assert (saturday.hour, sunday.hour) == (8, 8)
    assert sunday.astimezone(dt.UTC) - saturday.astimezone(dt.UTC) == dt.timedelta(hours=25)


@pytest.mark.parametrize(
    ("field", "names"),
    [
        ("*", "*"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("0,6", "sun,sat"),
        ("7", "sun"),
        ("0-6", "*"),
        ("*/2", "sun,tue,thu,sat"),
        ("mon-fri", "mon,tue,wed,thu,fri"),
        ("fri-sun", "sun,fri,sat"),
        ("1/3", "mon,thu"),
    ],
)
def test_weekday_fields_become_day_names(field: str, names: str) -> None:
    assert standard_weekdays(field) == names


def test_every_counts_from_now_and_has_a_canonical_form() -> None:
    every = parse_schedule("every 120 minutes", BERLIN, NOW)
    assert (every.kind, every.text, every.interval) == ("every", "every 2h", dt.timedelta(hours=2))
    assert first("every 2h") == NOW + dt.timedelta(hours=2)
    assert parse_schedule("every day", BERLIN, NOW).text == "every 1d"
    assert parse_schedule("Every 90m", BERLIN, NOW).text == "every 90m"


def test_one_shots_are_stored_as_the_absolute_time_they_meant() -> None:
    later = parse_schedule("in 30m", BERLIN, NOW)
    assert later.kind == "once" and not later.repeats
    assert later.text == "2026-05-01T10:30:00+02:00"
    again = parse_schedule(later.text, BERLIN, NOW + dt.timedelta(days=3))  # read back after a restart
    assert again.at == later.at
    assert first("2026-12-01T08:00") == dt.datetime(2026, 12, 1, 8, 0, tzinfo=BERLIN)  # winter time
    assert parse_schedule("2026-12-01T08:00", BERLIN, NOW).text == "2026-12-01T08:00:00+01:00"
    assert first("2026-12-01T08:00+00:00") == dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)
    assert first("at 2026-06-01 09:30") == dt.datetime(2026, 6, 1, 9, 30, tzinfo=BERLIN)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "it is empty"),
        ("every 0m", "more than zero"),
        ("every 10s", "more often than once a minute"),
        ("in soon", "a duration is a number and a unit"),
        ("0 25 * * *", "higher than the maximum value (23)"),
        ("0 8 * *", "4 fields where cron has 5"),
        ("0 8 * * 8", "weekday '8'"),
        ("2026-13-01T08:00", "not a valid date and time"),
        ("tomorrow", "unknown form"),
    ],
)
def test_invalid_schedules_are_one_sentence_that_says_what_is_allowed(text: str, detail: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(text, BERLIN, NOW)
    message = str(caught.value)
    assert detail in message
    assert "5 cron fields" in message and "'every 30m'" in message and "'in 2h'" in message
    assert message.count(". ") == 0 and message.endswith(".")


def test_a_new_one_shot_must_lie_ahead() -> None:
    with pytest.raises(ScheduleError, match="is in the past"):
        check_future(parse_schedule("2026-04-30T08:00", BERLIN, NOW), NOW)
    check_future(parse_schedule("in 1s", BERLIN, NOW), NOW)


def test_targets_and_time_zones() -> None:
    assert parse_target("telegram:-1001234:7") == parse_target(" Telegram:-1001234:7 ")
    assert parse_target("telegram:42").thread_id is None
    for bad in ("telegram", "telegram:", "12:34", "telegram:1:2:3"):
        with pytest.raises(ValueError, match="platform:chat_id"):
            parse_target(bad)
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        resolve_timezone("Mars/Olympus")
    assert resolve_timezone(None) is not None
