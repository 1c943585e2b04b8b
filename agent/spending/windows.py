"""The windows a cost counts in: a day and a month in the configured time zone, or one run of a job.

Pure functions of a timestamp and a zone. A window's id names it in the database and in Redis
(``day:2026-03-14``, ``month:2026-03``, ``run:<occurrence>``); ``end`` is when its limit starts again
(local midnight, also across a daylight saving change: a day may last 23 or 25 hours).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

WindowKind = Literal["day", "month", "run"]
CALENDAR: tuple[WindowKind, ...] = ("day", "month")


@dataclass(frozen=True)
class Window:
    kind: WindowKind
    id: str
    start: float | None  # seconds since the epoch; None for a run
    end: float | None  # when the window's limit starts again; None for a run (it ends with the run)


def _midnight(day: dt.date, zone: dt.tzinfo) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=zone)


def day_window(now: float, zone: dt.tzinfo) -> Window:
    """The local day ``now`` falls in."""
    today = dt.datetime.fromtimestamp(now, zone).date()
    start = _midnight(today, zone)
    end = _midnight(today + dt.timedelta(days=1), zone)
    return Window("day", f"day:{today.isoformat()}", start.timestamp(), end.timestamp())


def month_window(now: float, zone: dt.tzinfo) -> Window:
    """The local calendar month ``now`` falls in."""
    local = dt.datetime.fromtimestamp(now, zone)
    first = dt.date(local.year, local.month, 1)
    following = dt.date(local.year + local.month // 12, local.month % 12 + 1, 1)
    return Window(
        "month",
        f"month:{first.year:04d}-{first.month:02d}",
        _midnight(first, zone).timestamp(),
        _midnight(following, zone).timestamp(),
    )


def run_window(run: str) -> Window:
    """One run of a scheduled job (``run``: the occurrence's id)."""
    return Window("run", f"run:{run}", None, None)


def calendar_window(kind: WindowKind, now: float, zone: dt.tzinfo) -> Window:
    if kind == "day":
        return day_window(now, zone)
    if kind == "month":
        return month_window(now, zone)
    raise ValueError(f"a {kind} window is not a calendar window")


def zone_name(zone: dt.tzinfo) -> str:
    """How people call ``zone``: its IANA name when it has one (Europe/Berlin)."""
    return str(getattr(zone, "key", None) or zone)
