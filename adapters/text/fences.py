"""Code fences in Markdown, and the framing that keeps them balanced across split parts.

A part that ends inside a fenced code block gets the fence closed on a line of its own; the next
part reopens it with the original opening line (same fence characters, same language), so each
message renders its share of the code as code.

Recognised fences follow CommonMark loosely: a line of three or more backticks or tildes, the
opening one optionally followed by an info string (which for backticks may not contain a backtick:
a one-line ```` ```x``` ```` is inline code); the closing line repeats the character at least as
many times and holds nothing else. Any indentation is accepted, because model answers indent fences
inside list items by more than CommonMark's three spaces. Fences inside blockquotes (``> ```...``)
are not tracked.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

_FENCE_CHARACTERS = "`~"
_MIN_FENCE_RUN = 3


@dataclass(frozen=True)
class Fence:
    """One fenced code block; positions are code-point indices of the scanned text."""

    opener: str  # the opening line as written (indentation, fence run, info string)
    closer: str  # indentation plus the fence run: a line that closes this fence
    start: int  # first character of the opening line
    body_start: int  # just past the opening line's newline (len(text) when there is none)
    # An unclosed fence "closes" where the text's content ends: the author left it open, so the
    # last part leaves it open too, and only parts that stop earlier get a closing line.
    close_start: int  # first character of the closing line
    close_end: int  # just past the closing fence run


def code_block(text: str) -> str:
    """``text`` as a fenced code block, shown as it is (monospace, no Markdown: a line of dashes under
    a line is no heading there). The fence is longer than any run of backticks in ``text``, so nothing
    in it can close the block."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(_MIN_FENCE_RUN, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _fence_run(stripped_line: str) -> int:
    """Length of the run of one fence character that starts ``stripped_line`` (0 if none)."""
    if not stripped_line or stripped_line[0] not in _FENCE_CHARACTERS:
        return 0
    return len(stripped_line) - len(stripped_line.lstrip(stripped_line[0]))


@dataclass(frozen=True)
class _Opening:
    start: int
    body_start: int
    opener: str
    indent: str
    run: str

    def closes(self, stripped_line: str) -> bool:
        run_length = _fence_run(stripped_line)
        return (
            stripped_line[:1] == self.run[0]
            and run_length >= len(self.run)
            and not stripped_line[run_length:].strip()
        )

    def fence(self, close_start: int, close_end: int) -> Fence:
        return Fence(
            opener=self.opener,
            closer=self.indent + self.run,
            start=self.start,
            body_start=self.body_start,
            close_start=close_start,
            close_end=close_end,
        )


def _opening(start: int, line: str, text_length: int) -> _Opening | None:
    stripped = line.lstrip(" \t")
    run_length = _fence_run(stripped)
    if run_length < _MIN_FENCE_RUN or (stripped[0] == "`" and "`" in stripped[run_length:]):
        return None
    return _Opening(
        start=start,
        body_start=min(start + len(line) + 1, text_length),
        opener=line.rstrip(),
        indent=line[: len(line) - len(stripped)],
        run=stripped[:run_length],
    )


def find_fences(text: str) -> list[Fence]:
    """Every fenced code block of ``text``, in order; an unclosed one runs to the end."""
    fences: list[Fence] = []
    opening: _Opening | None = None
    start = 0
    for line in text.split("\n"):
        if opening is None:
            opening = _opening(start, line, len(text))
        else:
            stripped = line.lstrip(" \t")
            if opening.closes(stripped):
                close_end = start + len(line) - len(stripped) + _fence_run(stripped)
                fences.append(opening.fence(start, close_end))
                opening = None
        start += len(line) + 1
    if opening is not None:
        content_end = len(text.rstrip())
        fences.append(opening.fence(content_end, content_end))
    return fences


class FenceFraming:
    """Closes a fence at the end of a part that stops inside it and reopens it in the next part.

    Soft breaks are refused where a part would end with a fence just opened or start with the fence
    about to close (an empty code block), and inside the fence lines themselves.
    """

    def __init__(self, fences: list[Fence]) -> None:
        self._fences = fences
        self._starts = [fence.start for fence in fences]

    def _fence_at(self, position: int) -> Fence | None:
        index = bisect_right(self._starts, position) - 1
        if index >= 0 and position <= self._fences[index].close_end:
            return self._fences[index]
        return None

    def opening(self, start: int) -> str:
        fence = self._fence_at(start)
        if fence is not None and fence.body_start <= start <= fence.close_start:
            return fence.opener + "\n"
        return ""

    def closing(self, end: int) -> str:
        fence = self._fence_at(end)
        if fence is not None and fence.start < end < fence.close_end:
            return "\n" + fence.closer
        return ""

    def allows_break(self, position: int) -> bool:
        fence = self._fence_at(position)
        if fence is None:
            return True
        return not (
            fence.start < position <= fence.body_start or fence.close_start <= position < fence.close_end
        )
