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


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def money(value: float) -> str:
    """Dollars as people read them: $0.0042, $1.23, $1,234."""
    if value == 0:
        return "$0"
    if abs(value) < 0.01:
        return f"${value:.4f}"
    if abs(value) < 1000:
        return f"${value:,.2f}"
    return f"${value:,.0f}"


def tokens(value: float) -> str:
    """A token count in short: 950, 12.5k, 3.2M."""
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.1f}".removesuffix(".0") + unit
    return f"{value:.0f}"


def _ticks(top_value: float, form: str) -> list[Tick]:
    plot = HEIGHT - BOTTOM - TOP
    steps = 4
    show = money if form == "money" else tokens
    return [Tick(HEIGHT - BOTTOM - plot * i / steps, show(top_value * i / steps)) for i in range(steps + 1)]


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
        max((f.input_tokens + f.cache_read + f.cache_write + f.output_tokens for f in figures), default=0)
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
