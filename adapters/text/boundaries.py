"""Where a long text may be split, and the greedy plan that splits it into parts within a limit.

Both platform splitters share this core: Markdown for Discord and the terminal (with code fences
repaired around each part, see ``adapters.text.fences``) and Telegram's rendered plain text (no
repairs; entities are clipped afterwards). Each part ends at the best break that still fits:
a paragraph break, else a line break, else a word break, else a hard cut, which therefore only
ever happens inside a single word (or run of non-space characters) longer than the limit.

The parts are *spans* of the original text. Between two spans there is only whitespace, dropped at
the split: trailing whitespace of a part, blank lines at the start of the next, and the spaces of a
word break. A line's indentation at the start of a part is kept (it is list nesting or code). So::

    text == gap_0 + core_1 + gap_1 + ... + core_k + gap_k

where ``core_i`` is ``text[span_i.start:span_i.end]``, each ``gap_i`` is whitespace only
(``str.isspace``) and each ``core_i`` holds a non-whitespace character. Nothing is truncated.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

Measure = Callable[[str], int]

_LEADING_WHITESPACE = re.compile(r"\s*")
_NON_WHITESPACE = re.compile(r"\S")
_WORD_START = re.compile(r"(?<=\s)\S")  # re's \s is exactly str.isspace
_ZERO_WIDTH_JOINER = "\N{ZERO WIDTH JOINER}"
_EXTENDING_CATEGORIES = frozenset({"Mn", "Mc", "Me"})  # combining marks, variation selectors


class Framing(Protocol):
    """What a splitter adds around each part so the part stands on its own (code fences, say)."""

    def opening(self, start: int) -> str:
        """Text to put before a part whose core starts at ``start`` ("" for none)."""
        ...

    def closing(self, end: int) -> str:
        """Text to put after a part whose core ends at ``end`` ("" for none)."""
        ...

    def allows_break(self, position: int) -> bool:
        """Whether a soft break at ``position`` is acceptable (a hard cut may still land there)."""
        ...


class _NoFraming:
    def opening(self, start: int) -> str:
        return ""

    def closing(self, end: int) -> str:
        return ""

    def allows_break(self, position: int) -> bool:
        return True


NO_FRAMING: Framing = _NoFraming()


@dataclass(frozen=True)
class Span:
    """One planned part: the core ``text[start:end]`` plus what the framing put around it."""

    start: int
    end: int
    opening: str = ""
    closing: str = ""

    def render(self, text: str) -> str:
        return self.opening + text[self.start : self.end] + self.closing


@dataclass(frozen=True)
class _Breaks:
    """Soft break positions (index of the first character of the next part), ascending."""

    paragraph: list[int]  # first line after a blank line
    line: list[int]  # first character of any line but the first
    word: list[int]  # first character after whitespace


def _find_breaks(text: str) -> _Breaks:
    paragraph: list[int] = []
    line: list[int] = []
    previous_blank = False
    line_start = 0
    while line_start < len(text):
        newline = text.find("\n", line_start)
        line_end = len(text) if newline == -1 else newline
        blank = not text[line_start:line_end].strip()
        if line_start > 0:
            line.append(line_start)
            if previous_blank and not blank:
                paragraph.append(line_start)
        previous_blank = blank
        line_start = line_end + 1
    word = [match.start() for match in _WORD_START.finditer(text)]
    return _Breaks(paragraph, line, word)


def _is_cluster_break(text: str, position: int) -> bool:
    """Whether a hard cut at ``position`` keeps user-perceived characters whole (a heuristic).

    It refuses to separate a surrogate pair stored as two code points, a base from its combining
    marks or variation selector, an emoji from its skin-tone modifier, and a zero-width-joiner
    sequence. Full grapheme segmentation is not worth a dependency for a last-resort cut.
    """
    before, after = text[position - 1], text[position]
    if "\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff":
        return False
    if _ZERO_WIDTH_JOINER in (before, after):
        return False
    if "\U0001f3fb" <= after <= "\U0001f3ff":
        return False
    return unicodedata.category(after) not in _EXTENDING_CATEGORIES


def _content_start(text: str, position: int) -> int:
    """First position at or after ``position`` where a part may begin.

    Skips blank lines, and mid-line the spaces of a word break; keeps indentation at a line start.
    Returns ``len(text)`` when only whitespace remains.
    """
    content = _NON_WHITESPACE.search(text, position)
    if content is None:
        return len(text)
    last_newline = text.rfind("\n", position, content.start())
    if last_newline != -1:
        return last_newline + 1
    if position == 0 or text[position - 1] == "\n":
        return position
    return content.start()


def _trimmed_end(text: str, start: int, end: int) -> int:
    return start + len(text[start:end].rstrip())


def _reach(text: str, start: int, opening: str, limit: int, measure: Measure) -> int:
    """Largest ``end`` with ``measure(opening + text[start:end]) <= limit`` (``start`` if none).

    Gallops, then bisects, so the cost is a few measurements of about ``limit`` characters however
    long the text is. Assumes ``measure`` never shrinks when text is appended.
    """

    def fits(end: int) -> bool:
        return measure(opening + text[start:end]) <= limit

    low, step = start, 1
    while low < len(text):
        high = min(low + step, len(text))
        if not fits(high):
            break
        low, step = high, step * 2
    else:
        return len(text)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


class _Planner:
    def __init__(self, text: str, limit: int, measure: Measure, framing: Framing) -> None:
        self.text = text
        self.limit = limit
        self.measure = measure
        self.framing = framing
        self.breaks = _find_breaks(text)

    def plan(self) -> list[Span]:
        spans: list[Span] = []
        start = _content_start(self.text, 0)
        while start < len(self.text):
            span = self._next_span(start)
            spans.append(span)
            start = _content_start(self.text, span.end)
        return spans

    def _fit(self, start: int, end: int, framing: Framing) -> Span | None:
        core_end = _trimmed_end(self.text, start, end)
        if core_end <= start:
            return None
        span = Span(start, core_end, framing.opening(start), framing.closing(core_end))
        return span if self.measure(span.render(self.text)) <= self.limit else None

    def _candidates(self, start: int, reach: int, framing: Framing) -> Iterator[int]:
        """Break positions for a part from ``start`` fitting up to ``reach``, best first.

        Level by level, latest first. A soft break may lie past ``reach`` by the whitespace that
        the split drops.
        """
        after_whitespace = _LEADING_WHITESPACE.match(self.text, reach)
        soft_reach = after_whitespace.end() if after_whitespace else reach
        for level in (self.breaks.paragraph, self.breaks.line, self.breaks.word):
            first, last = bisect_right(level, start), bisect_right(level, soft_reach)
            for index in range(last - 1, first - 1, -1):
                if framing.allows_break(level[index]):
                    yield level[index]
        for position in range(min(reach, len(self.text) - 1), start, -1):
            if framing.allows_break(position) and _is_cluster_break(self.text, position):
                yield position
        yield from range(reach, start, -1)

    def _next_span(self, start: int) -> Span:
        # Last resorts, in order: drop the indentation kept at a line start, then the framing.
        # The limit always wins over layout and repairs.
        indentation = _LEADING_WHITESPACE.match(self.text, start)
        unindented = indentation.end() if indentation else start
        for framing in (self.framing, NO_FRAMING):
            for first in dict.fromkeys((start, unindented)):
                span = self._best_span(first, framing)
                if span is not None:
                    return span
        raise ValueError(f"limit {self.limit} cannot hold the character {self.text[unindented]!r}")

    def _best_span(self, start: int, framing: Framing) -> Span | None:
        reach = _reach(self.text, start, framing.opening(start), self.limit, self.measure)
        if reach == len(self.text):
            rest = self._fit(start, reach, framing)
            if rest is not None:
                return rest
        for position in self._candidates(start, reach, framing):
            span = self._fit(start, position, framing)
            if span is not None:
                return span
        return None


def plan_spans(text: str, limit: int, measure: Measure = len, framing: Framing = NO_FRAMING) -> list[Span]:
    """Split ``text`` into spans whose rendering measures at most ``limit`` (see module docstring).

    ``measure`` must not shrink when text is appended (``len``, ``utf16_len`` qualify). Raises
    ``ValueError`` only when ``limit`` cannot hold one character of the text on its own.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    return _Planner(text, limit, measure, framing).plan()
