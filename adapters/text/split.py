"""Split Markdown for platforms that render it themselves (Discord, Matrix), and for the terminal.

The Markdown passes through untouched; only code fences are repaired around split points.
"""

from __future__ import annotations

from adapters.text.boundaries import Measure, plan_spans
from adapters.text.fences import FenceFraming, find_fences


def split_markdown(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split ``text`` into parts with ``measure(part) <= limit``, never truncating.

    Breaks at the last paragraph break that fits, else line break, else word break; a hard cut
    happens only inside a single word longer than the limit (and avoids splitting an emoji or a
    character from its combining marks). A part that stops inside a fenced code block ends with a
    closing fence line, and the next part starts with the original opening line (same fence, same
    language); both added lines count toward ``limit``. No part is empty or whitespace-only; blank
    or empty input gives ``[]``.

    Invariant (tested): remove from each part the fence lines added here (a leading reopening line
    ``opener + "\\n"``, a trailing ``"\\n" + closer``) to get its core; then
    ``text == gap_0 + core_1 + gap_1 + ... + core_k + gap_k`` where every ``gap_i`` is whitespace
    only. Whitespace is dropped only at split points and at the ends of the text.

    ``measure`` must not shrink when text is appended (``len`` for Discord, ``utf16_len``...).
    Fence repairs give way to the limit: if a limit is too small to hold a fence's opening line,
    closing line and one character, that part goes out without the repair. ``ValueError`` only
    if ``limit`` cannot hold a single character.
    """
    framing = FenceFraming(find_fences(text))
    return [span.render(text) for span in plan_spans(text, limit, measure, framing)]
