"""Where a month's spending is heading: the month's projected spend at the pace so far, and the day a
monthly limit would be reached at that pace. Pure functions of the facts (no I/O).

The pace is what was spent divided by the time the month has run, counted as at least one day, so a
few cents in the first minutes of a month do not project to hundreds of dollars.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY = 86_400.0


@dataclass(frozen=True)
class Forecast:
    """A month at its pace so far."""

    projected: float  # what the whole month would cost at the pace so far
    limit: float | None  # the month's limit (None: it has none)
    reaches_at: float | None  # when the limit would be reached at this pace (None: not this month)
    reached: bool = False  # it is reached already

    @property
    def over(self) -> bool:
        return self.limit is not None and self.projected > self.limit


def month_forecast(
    spent: float, limit: float | None, start: float | None, end: float | None, now: float
) -> Forecast | None:
    """The month ``start``..``end`` that has spent ``spent`` by ``now``, against a monthly ``limit`` (None:
    none, so none is reached); None for a window that is no calendar month."""
    if start is None or end is None or not start <= now < end:
        return None
    pace = spent / max(now - start, DAY)  # dollars a second
    projected = spent + pace * (end - now)
    if limit is None:
        return Forecast(projected, None, None)
    if spent >= limit:
        return Forecast(projected, limit, now, reached=True)
    reaches = now + (limit - spent) / pace if pace > 0 else None
    return Forecast(projected, limit, reaches if reaches is not None and reaches < end else None)
