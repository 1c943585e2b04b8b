"""Schedules: what a user may write, its canonical text, and the APScheduler trigger it becomes.

Pure functions of the text, a time zone and "now" (no clock is read here), so they are tested without
a scheduler. Four forms:

- five cron fields (``0 8 * * 1-5``), read in the scheduler's time zone with standard cron weekdays
  (0 and 7 are Sunday); APScheduler 3 numbers weekdays from Monday, so weekday fields are translated
  to names before they reach it;
- ``every 2h`` (units s, m, h, d; at least a minute), the next run counted from the previous one;
- ``in 30m``: once, that long from now;
- an ISO time (``2026-12-01T08:00``): once, in the scheduler's time zone unless it carries an offset.

A stored schedule is its canonical text (a one-shot's "in 30m" is stored as the absolute time it
meant), so parsing it again after a restart means the same thing.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Literal

ALLOWED = (
    "use 5 cron fields such as '0 8 * * 1-5', 'every 30m' (units s, m, h, d), 'in 2h' for once, "
    "or an ISO time such as '2026-12-01T08:00'"
)
MIN_INTERVAL = dt.timedelta(minutes=1)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
UNIT_WORDS = {
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
}  # fmt: skip
DURATION = re.compile(r"^(\d{1,6})?\s*([a-z]+)$")  # "every day" = "every 1d"
ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")

Kind = Literal["cron", "every", "once"]


class ScheduleError(ValueError):
    """A schedule that cannot be used; the message is one sentence that says what is allowed."""


def _error(text: str, detail: str) -> ScheduleError:
    return ScheduleError(f"'{text}' is not a schedule I can use ({detail}): {ALLOWED}.")


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule; ``text`` is the canonical form that is stored and shown."""

    kind: Kind
    text: str
    interval: dt.timedelta | None = None  # every
    at: dt.datetime | None = None  # once (aware)
    cron: str | None = None  # the fields as APScheduler reads them (weekdays as names)

    @property
    def repeats(self) -> bool:
        return self.kind != "once"

    def trigger(self, tz: dt.tzinfo) -> Any:
        """The APScheduler 3 trigger (typed ``Any``: APScheduler 3 ships no type information)."""
        # Imported here: only a job being made, checked or scheduled needs a trigger, and a process that
        # makes none (a terminal's one question) should not load APScheduler.
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.date import DateTrigger
        from apscheduler.triggers.interval import IntervalTrigger

        if self.kind == "cron":
            assert self.cron is not None
            minute, hour, day, month, weekday = self.cron.split()
            return CronTrigger(
                minute=minute, hour=hour, day=day, month=month, day_of_week=weekday, timezone=tz
            )
        if self.kind == "every":
            assert self.interval is not None
            return IntervalTrigger(seconds=int(self.interval.total_seconds()), timezone=tz)
        assert self.at is not None
        return DateTrigger(run_date=self.at, timezone=tz)

    def first_run(self, tz: dt.tzinfo, now: dt.datetime) -> dt.datetime | None:
        """When a job with this schedule, created (or resumed) at ``now``, runs first."""
        if self.kind == "every":
            assert self.interval is not None
            return now + self.interval
        if self.kind == "once":
            return self.at
        fire: dt.datetime | None = self.trigger(tz).get_next_fire_time(None, now)
        return fire


GAP_RUNS = 1500  # runs of a cron schedule looked at for its shortest gap: over a year of a daily job


def shortest_gap(schedule: Schedule, tz: dt.tzinfo, now: dt.datetime) -> dt.timedelta | None:
    """The shortest time between two runs of ``schedule`` (None: it runs once).

    For cron fields, over its next :data:`GAP_RUNS` runs from ``now``: the gaps of a pattern repeat
    daily, weekly, monthly or yearly, so its shortest shows within that many runs (an every-minute
    job's at once, a daily job's within the year).
    """
    if schedule.kind == "once":
        return None
    if schedule.kind == "every":
        return schedule.interval
    trigger = schedule.trigger(tz)
    shortest: dt.timedelta | None = None
    fire = trigger.get_next_fire_time(None, now)
    for _ in range(GAP_RUNS):
        if fire is None:
            break
        after = (fire.astimezone(dt.UTC) + dt.timedelta(seconds=1)).astimezone(tz)  # in real time: DST
        following = trigger.get_next_fire_time(fire, after)
        if following is None:
            break
        gap = following.astimezone(dt.UTC) - fire.astimezone(dt.UTC)
        shortest = gap if shortest is None else min(shortest, gap)
        if shortest <= MIN_INTERVAL:  # no cron schedule runs more often than every minute
            break
        fire = following
    return shortest


def format_gap(gap: dt.timedelta) -> str:
    """A gap as people say it: "1 minute", "15 minutes", "2 hours", "1 day", "90 seconds"."""
    seconds = int(gap.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} seconds"


def parse_schedule(text: str, tz: dt.tzinfo, now: dt.datetime) -> Schedule:
    """Parse what a user wrote (or a stored canonical text); raises :class:`ScheduleError`."""
    clean = " ".join(text.strip().split())
    lowered = clean.lower()
    if not clean:
        raise _error(text, "it is empty")
    if lowered.startswith("every "):
        interval = _duration(clean, lowered[len("every ") :])
        if interval < MIN_INTERVAL:
            raise _error(clean, "repeating more often than once a minute is not allowed")
        return Schedule("every", f"every {_format_duration(interval)}", interval=interval)
    if lowered.startswith("in "):
        at = (now + _duration(clean, lowered[len("in ") :])).replace(microsecond=0)
        return Schedule("once", at.isoformat(), at=at)
    if lowered.startswith("at "):
        clean, lowered = clean[3:], lowered[3:]
    if ISO_TIME.match(clean):
        return _once(clean, tz)
    fields = clean.split(" ")
    if len(fields) == 5:
        return _cron(clean, fields, tz)
    detail = f"{len(fields)} fields where cron has 5" if len(fields) > 2 else "unknown form"
    raise _error(clean, detail)


def check_future(schedule: Schedule, now: dt.datetime) -> None:
    """A new one-shot must lie ahead (a stored one may be in the past: it was missed)."""
    if schedule.kind == "once" and schedule.at is not None and schedule.at <= now:
        raise ScheduleError(
            f"'{schedule.text}' is in the past: give a future time, 'in 30m', or a repeating schedule."
        )


def _duration(text: str, amount: str) -> dt.timedelta:
    match = DURATION.match(amount.strip())
    if match is None or match.group(2) not in UNIT_WORDS:
        raise _error(text, "a duration is a number and a unit such as 30m")
    seconds = int(match.group(1) or 1) * UNITS[UNIT_WORDS[match.group(2)]]
    if seconds <= 0:
        raise _error(text, "the duration must be more than zero")
    return dt.timedelta(seconds=seconds)


def _format_duration(interval: dt.timedelta) -> str:
    """The largest unit that divides the interval exactly: 7200 s → "2h"."""
    seconds = int(interval.total_seconds())
    for unit in ("d", "h", "m"):
        if seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


def _once(text: str, tz: dt.tzinfo) -> Schedule:
    try:
        at = dt.datetime.fromisoformat(text.replace(" ", "T", 1))
    except ValueError:
        raise _error(text, "not a valid date and time") from None
    if at.tzinfo is None:
        at = _localize(at, tz)
    at = at.replace(microsecond=0)
    return Schedule("once", at.isoformat(), at=at)


def _localize(naive: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
    """``naive`` as a wall-clock time in ``tz`` (a time skipped by a DST change moves forward)."""
    aware = naive.replace(tzinfo=tz)
    round_trip = aware.astimezone(dt.UTC).astimezone(tz)
    return round_trip if round_trip.replace(tzinfo=None) != naive else aware


def _cron(text: str, fields: list[str], tz: dt.tzinfo) -> Schedule:
    try:
        weekdays = standard_weekdays(fields[4])
    except ValueError as error:
        raise _error(text, str(error)) from None
    cron = " ".join([*fields[:4], weekdays])
    try:
        Schedule("cron", text, cron=cron).trigger(tz)
    except ValueError as error:
        raise _error(text, str(error).rstrip(".")) from None
    return Schedule("cron", text, cron=cron)


def standard_weekdays(field: str) -> str:
    """A cron weekday field (0 or 7 = Sunday, names allowed) as APScheduler 3 day names.

    ``1-5`` → ``mon,tue,wed,thu,fri``; ``*`` stays ``*``; raises ValueError naming the bad part.
    """
    days: set[int] = set()
    for part in field.lower().split(","):
        spec, _, step_text = part.partition("/")
        step = _number(step_text, part) if step_text else 1
        if step < 1:
            raise ValueError(f"weekday step in '{part}' must be at least 1")
        if spec == "*":
            first, last = 0, 6
        elif "-" in spec:
            low, _, high = spec.partition("-")
            first, last = _weekday(low, part), _weekday(high, part)
            if last == 0 and first > 0:
                last = 7  # "fri-sun": Sunday closes the week
        else:
            first = _weekday(spec, part)
            last = 6 if step_text else first
        if last < first:
            raise ValueError(f"weekday range '{part}' runs backwards")
        days.update(day % 7 for day in range(first, last + 1, step))
    if days == set(range(7)):
        return "*"
    return ",".join(WEEKDAYS[day] for day in sorted(days))


def _weekday(value: str, part: str) -> int:
    value = value.strip()
    if value in WEEKDAYS:
        return WEEKDAYS.index(value)
    if len(value) > 3 and value[:3] in WEEKDAYS:
        return WEEKDAYS.index(value[:3])
    number = _number(value, part)
    if not 0 <= number <= 7:
        raise ValueError(f"weekday '{value}' is not 0-7 or a day name")
    return number


def _number(value: str, part: str) -> int:
    if not value.isdigit():
        raise ValueError(f"'{part}' is not a weekday field")
    return int(value)


