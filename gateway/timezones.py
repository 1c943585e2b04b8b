"""The bot's time zone (``scheduler.timezone``): cron fields, ISO times without an offset, the budgets'
days and months and the console's daily figures are all read in it."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal


def resolve_timezone(name: str | None) -> dt.tzinfo:
    """``scheduler.timezone``: an IANA name, or None for the system's zone."""
    if name is None:
        return tzlocal.get_localzone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone '{name}' (use an IANA name such as Europe/Berlin)") from None
