"""The console's charts as geometry: bars, axis ticks, labels and markers in SVG user units.

Pure functions of the figures; the templates draw them as inline SVG (no script, no chart library, no
CDN: the pages work offline). Every text a chart carries (labels, tooltips) goes through the templates'
autoescaping like any other text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH = 720.0
HEIGHT = 240.0
LEFT = 56.0  # room for the value axis
RIGHT = 8.0
TOP = 16.0
BOTTOM = 28.0  # room for the labels under the bars
GAP = 0.2  # share of a bar's slot left empty
MIN_TOKEN_AXIS = 5  # tokens: the shortest axis whose steps are whole tokens


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    kind: str  # the series (a CSS class: its colour)
    title: str  # the tooltip


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class Label:
    x: float
    text: str


@dataclass(frozen=True)
class Marker:
    x: float
    y: float
    kind: str
    title: str


@dataclass(frozen=True)
class Series:
    kind: str
    label: str


@dataclass(frozen=True)
class Chart:
    bars: list[Rect]
    ticks: list[Tick]
    labels: list[Label]
    legend: list[Series] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    marker_legend: list[Series] = field(default_factory=list)  # what the markers' colours mean
    width: float = WIDTH
    height: float = HEIGHT
    left: float = LEFT
    right: float = WIDTH - RIGHT
    top: float = TOP
    bottom: float = HEIGHT - BOTTOM

    @property
    def empty(self) -> bool:
        return not any(bar.height > 0 for bar in self.bars)


# An axis ends on 1, 2, 2.5 or 5 times a power of ten, and is cut into steps of 0.2, 0.5 or 1 times one:
# ticks are round numbers, and a label as precise as its step tells every tick apart.
_AXIS_STEPS = ((1.0, 5), (2.0, 4), (2.5, 5), (5.0, 5), (10.0, 5))  # (the axis's end, its steps)


def nice_ceiling(value: float, *, least: float = 0.0) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` and ``least`` (1 for
    nothing)."""
    value = max(value, least)
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for end, _ in _AXIS_STEPS:
        if value <= end * power * (1 + 1e-9):
            return end * power
    return 10 * power


def _steps(top_value: float) -> int:
    """How many steps the axis ending at ``top_value`` (a :func:`nice_ceiling`) is cut into."""
    power = 10.0 ** math.floor(math.log10(top_value) + 1e-9)
    mantissa = top_value / power
    return next((steps for end, steps in _AXIS_STEPS if math.isclose(mantissa, end)), 5)


def _decimals(step: float) -> int:
    """The fewest decimals that write every multiple of ``step`` exactly (0.025: 3)."""
    for decimals in range(9):
        if math.isclose(step * 10**decimals, round(step * 10**decimals), abs_tol=1e-6):
            return decimals
    return 9


def money(value: float, *, decimals: int | None = None) -> str:
    """Dollars as people read them: $0.0042, $1.23, $1,234; below zero -$0.0087 (never $-0.0087).
    ``decimals``: exactly that many (an axis's ticks, all alike)."""
    amount = abs(value)
    if decimals is not None:
        text = f"{amount:,.{decimals}f}"
    elif amount < 0.01:
        text = f"{amount:.4f}"
    elif amount < 1000:
        text = f"{amount:,.2f}"
    else:
        text = f"{amount:,.0f}"
    if not any(digit in text for digit in "123456789"):
        return "$0" if decimals is None else f"${text}"  # nothing to show: no sign either
    return f"{'-' if value < 0 else ''}${text}"


def saving(value: float) -> str:
    """What caching did to the bill: "saved $0.12 by caching", or when cache writes were never read back
    "caching cost $0.0087 more"."""
    if money(value).startswith("-"):
        return f"caching cost {money(-value)} more"
    return f"saved {money(value)} by caching"


def tokens(value: float) -> str:
    """A token count in short: 950, 12.5k, 3.2M."""
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.1f}".removesuffix(".0") + unit
    return f"{value:.0f}"


def _ticks(top_value: float, form: str) -> list[Tick]:
    """The value axis's ticks from 0 to ``top_value``, each labelled as precisely as the step needs."""
    plot = HEIGHT - BOTTOM - TOP
    steps = _steps(top_value)
    step = top_value / steps
    places = _decimals(step)
    places = 2 if 0 < places < 2 else places  # cents: $0.50, not $0.5

    def label(value: float) -> str:
        if form != "money":
            return tokens(value)
        return "$0" if value == 0 else money(value, decimals=places)

    return [Tick(HEIGHT - BOTTOM - plot * i / steps, label(step * i)) for i in range(steps + 1)]


def _slots(count: int) -> tuple[float, float]:
    """The width of each bar's slot and of the bar in it."""
    slot = (WIDTH - RIGHT - LEFT) / max(count, 1)
    return slot, slot * (1 - GAP)


def daily_spend(days: Sequence[tuple[str, float, int]], *, label_every: int = 5) -> Chart:
    """One bar per day of ``(date, dollars, requests)``; the last day's date and every
    ``label_every``-th before it are written under the bars."""
    top_value = nice_ceiling(max((spent for _, spent, _ in days), default=0.0))
    plot = HEIGHT - BOTTOM - TOP
    slot, width = _slots(len(days))
    bars, labels = [], []
    for i, (date, spent, requests) in enumerate(days):
        height = plot * spent / top_value
        x = LEFT + i * slot + (slot - width) / 2
        title = f"{date}: {money(spent)} ({requests:,} request{'s' if requests != 1 else ''})"
        bars.append(Rect(x, HEIGHT - BOTTOM - height, width, height, "spend", title))
        if (len(days) - 1 - i) % label_every == 0:
            labels.append(Label(x + width / 2, date[5:]))
    return Chart(bars, _ticks(top_value, "money"), labels)


TURN_SERIES = (
    Series("input", "input (uncached)"),
    Series("read", "cache read"),
    Series("write", "cache write"),
    Series("output", "output"),
)


@dataclass(frozen=True)
class TurnFigures:
    """One request's tokens, as the turn chart stacks them (bottom to top)."""

    request_id: int
    label: str  # the tooltip's first line: when, purpose, model
    input_tokens: int
    cache_read: int
    cache_write: int
    output_tokens: int


@dataclass(frozen=True)
class MissMark:
    """A cache miss on one request: its cause (a CSS class: its colour), how the legend names the cause,
    the marker's tooltip."""

    request_id: int
    cause: str
    label: str
    title: str


def turns(figures: Sequence[TurnFigures], misses: Sequence[MissMark] = (), *, label_every: int = 10) -> Chart:
    """Stacked bars, one per request, oldest first; a miss is a marker above its request's bar, in the
    colour of its cause (the legend names each cause marked)."""
    top_value = nice_ceiling(
        max((f.input_tokens + f.cache_read + f.cache_write + f.output_tokens for f in figures), default=0),
        least=MIN_TOKEN_AXIS,
    )
    plot = HEIGHT - BOTTOM - TOP
    slot, width = _slots(len(figures))
    bars: list[Rect] = []
    labels: list[Label] = []
    tops: dict[int, tuple[float, float]] = {}
    for i, f in enumerate(figures):
        x = LEFT + i * slot + (slot - width) / 2
        base = HEIGHT - BOTTOM
        total = f.input_tokens + f.cache_read + f.cache_write + f.output_tokens
        title = (
            f"{f.label}: {total:,} tokens: {f.input_tokens:,} input, {f.cache_read:,} cache read, "
            f"{f.cache_write:,} cache write, {f.output_tokens:,} output"
        )
        for series, value in zip(
            TURN_SERIES, (f.input_tokens, f.cache_read, f.cache_write, f.output_tokens), strict=True
        ):
            height = plot * value / top_value
            if height > 0:
                bars.append(Rect(x, base - height, width, height, series.kind, title))
            base -= height
        tops[f.request_id] = (x + width / 2, base)
        if (len(figures) - 1 - i) % label_every == 0:
            labels.append(Label(x + width / 2, f"#{i + 1}"))
    marked = [m for m in misses if m.request_id in tops]
    markers = [
        Marker(tops[m.request_id][0], max(TOP, tops[m.request_id][1] - 2), m.cause, m.title) for m in marked
    ]
    causes = {m.cause: Series(m.cause, m.label) for m in marked}  # each cause once, in the order met
    return Chart(bars, _ticks(top_value, "tokens"), labels, list(TURN_SERIES), markers, list(causes.values()))
