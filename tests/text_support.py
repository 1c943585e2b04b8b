"""Strategies and invariant checks shared by the tests of ``adapters.text`` and the renderers.

The checks are written independently of the product code (their own fence reading, their own
clipping), so a property test compares two implementations rather than one with itself.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Sequence

from hypothesis import strategies as st

from adapters.base import OutboundText
from adapters.text.units import utf16_len, utf16_offsets

# --- Strategies ---------------------------------------------------------------------------------

# Any code point: astral characters, control characters and lone surrogates included.
any_char = st.characters(codec=None, exclude_categories=())
astral_char = st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF)
awkward_char = st.sampled_from(list("\x00\x07\r\x85\u2028\ufeff\u200d\ud800\udfff"))
any_text = st.text(st.one_of(any_char, astral_char, awkward_char, st.just("\n"), st.just(" ")), max_size=400)

# Single code points, so st.text can draw them fast: letters, an astral emoji, a skin-tone modifier,
# regional indicators, a zero-width joiner, CJK and a combining accent land in every order.
_WORD_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789éß😀🏽🇫🇷\u200d中\u0301"
word = st.text(st.sampled_from(_WORD_CHARACTERS), min_size=1, max_size=12)
long_word = st.text(st.sampled_from(_WORD_CHARACTERS), min_size=60, max_size=300)
words = st.one_of(
    st.text(st.sampled_from(_WORD_CHARACTERS + " " * 8), min_size=1, max_size=200),
    st.lists(st.one_of(word, long_word), min_size=1, max_size=4).map(" ".join),
)

_inline = st.one_of(
    words,
    word.map(lambda w: f"**{w}**"),
    word.map(lambda w: f"_{w}_"),
    word.map(lambda w: f"`{w}`"),
    word.map(lambda w: f"~~{w}~~"),
    word.map(lambda w: f"||{w}||"),
    word.map(lambda w: f"[{w}](https://example.com/{w})"),
)
line = st.lists(_inline, min_size=1, max_size=6).map(" ".join)
_code_line = st.one_of(words, words.map(lambda w: "    " + w), st.just(""), st.just("  **not bold**"))
_language = st.sampled_from(["", "python", "bash", "json", "c++", "mermaid"])


@st.composite
def fenced_block(draw: st.DrawFn) -> str:
    fence = draw(st.sampled_from(["```", "````", "~~~"]))
    indent = draw(st.sampled_from(["", "", "  ", "   "]))
    body = draw(st.lists(_code_line, min_size=0, max_size=25))
    lines = [indent + fence + draw(_language), *(indent + code for code in body), indent + fence]
    return "\n".join(lines)


block = st.one_of(
    line,
    st.lists(line, min_size=1, max_size=4).map("\n".join),
    st.tuples(st.integers(1, 6), line).map(lambda p: "#" * p[0] + " " + p[1]),
    st.lists(st.tuples(st.sampled_from(["- ", "  - ", "1. ", "* "]), line), min_size=1, max_size=6).map(
        lambda items: "\n".join(marker + text for marker, text in items)
    ),
    st.lists(line, min_size=1, max_size=4).map(lambda ls: "\n".join("> " + x for x in ls)),
    st.lists(st.tuples(word, word), min_size=1, max_size=5).map(
        lambda rows: "| a | b |\n|---|---|\n" + "\n".join(f"| {x} | {y} |" for x, y in rows)
    ),
    fenced_block(),
    st.just("---"),
)
_separator = st.sampled_from(["\n\n", "\n", "\n\n\n"])
markdownish = st.lists(st.tuples(block, _separator), min_size=1, max_size=10).map(
    lambda blocks: "".join(text + separator for text, separator in blocks)
)

# --- Fences, read independently -----------------------------------------------------------------


def _fence_run(stripped: str) -> str:
    if not stripped or stripped[0] not in "`~":
        return ""
    return stripped[: len(stripped) - len(stripped.lstrip(stripped[0]))]


def is_fence_line(line: str) -> bool:
    run = _fence_run(line.strip())
    return len(run) >= 3 and not (run[0] == "`" and "`" in line.strip()[len(run) :])


def open_fence_at_end(text: str) -> str | None:
    """The fence run still open after the last line of ``text``, or None."""
    open_run: str | None = None
    for text_line in text.split("\n"):
        stripped = text_line.strip()
        run = _fence_run(stripped)
        if open_run is None:
            if is_fence_line(text_line):
                open_run = run
        elif run and run[0] == open_run[0] and len(run) >= len(open_run) and stripped == run:
            open_run = None
    return open_run


# --- Content preservation -----------------------------------------------------------------------


def chain_starts(text: str, cores: Sequence[Sequence[str]]) -> list[int] | None:
    """Positions where the cores sit, if ``text == gap_0 + core_1 + gap_1 + ... + core_k + gap_k``.

    Every gap must be whitespace only. ``cores[i]`` lists the candidate readings of part ``i``
    (with and without added fence lines); one reading per part must fit. None when no chain exists.
    """
    # frontier: end of the chain so far -> the starts of its cores (one chain per end suffices)
    frontier: dict[int, tuple[int, ...]] = {0: ()}
    for readings in cores:
        advanced: dict[int, tuple[int, ...]] = {}
        for position, starts in frontier.items():
            start = position
            while True:
                for core in readings:
                    if core and text.startswith(core, start):
                        advanced.setdefault(start + len(core), (*starts, start))
                if start == len(text) or not text[start].isspace():
                    break
                start += 1
        frontier = advanced
    for position, starts in frontier.items():
        if not text[position:].strip():
            return list(starts)
    return None


def markdown_readings(part: str) -> list[str]:
    """``part`` with and without a leading and/or trailing fence line (the possible repairs)."""
    readings = [part]
    lines = part.split("\n")
    if len(lines) > 1 and is_fence_line(lines[0]):
        readings.append("\n".join(lines[1:]))
    if len(lines) > 1 and is_fence_line(lines[-1]):
        readings.append("\n".join(lines[:-1]))
        if len(lines) > 2 and is_fence_line(lines[0]):
            readings.append("\n".join(lines[1:-1]))
    return readings


# --- Telegram parts ----------------------------------------------------------------------------


def assert_valid_part(part: OutboundText, limit: int) -> None:
    """One message Telegram accepts: within the limit, not blank, entities in range and whole."""
    size = utf16_len(part.text)
    assert 0 < size <= limit
    assert part.text.strip()
    part.text.encode("utf-8")  # no lone surrogate left
    assert not any(unicodedata.category(c) == "Cc" and c not in "\t\n" for c in part.text)
    boundaries = set(utf16_offsets(part.text))
    for entity in part.entities:
        assert entity.length > 0
        assert entity.offset >= 0 and entity.offset + entity.length <= size
        assert entity.offset in boundaries and entity.offset + entity.length in boundaries
    quotes = sorted((e.offset, e.offset + e.length) for e in part.entities if e.type.endswith("blockquote"))
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(quotes))


def clipped(message: OutboundText, start: int, end: int) -> list[tuple[object, ...]]:
    """The entities of ``message`` inside UTF-16 ``[start, end)``, rebased, as sortable tuples."""
    result = []
    for e in message.entities:
        low, high = max(e.offset, start), min(e.offset + e.length, end)
        if low < high:
            result.append((low - start, high - low, e.type, e.url or "", e.language or ""))
    return sorted(result)


def entity_tuples(part: OutboundText) -> list[tuple[object, ...]]:
    return sorted((e.offset, e.length, e.type, e.url or "", e.language or "") for e in part.entities)
