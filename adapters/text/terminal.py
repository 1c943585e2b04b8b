"""The terminal's renderer: Markdown as a terminal shows it, which is as text.

A terminal draws no Markdown, so what it prints is the Markdown as written, with one exception: the
fence lines of a fenced code block (```` ```python ```` and the closing ```` ``` ````) only say "this
is code", and printed they are clutter around a table or a listing (``/insights`` put every table
between two). The block's own lines are printed as they are, in their columns and copyable.
"""

from __future__ import annotations

from adapters.base import OutboundText
from adapters.text.fences import find_fences
from adapters.text.split import split_markdown


def render_terminal(source: str, limit: int) -> list[OutboundText]:
    """Messages to print for ``source`` (sanitized Markdown, see ``Capabilities.render``): split at
    ``limit`` like any Markdown, each part without its code fences' lines; a part that would be left
    blank (nothing but empty code blocks) is printed as written. ``[]`` when there is nothing to print."""
    return [OutboundText(_shown(part)) for part in split_markdown(source, limit)]


def _shown(part: str) -> str:
    shown = without_fence_lines(part)
    return shown if shown.strip() else part


def without_fence_lines(markdown: str) -> str:
    """``markdown`` with each fenced code block's opening and closing lines removed, its body kept."""
    kept: list[str] = []
    position = 0
    for fence in find_fences(markdown):
        kept.append(markdown[position : fence.start])
        kept.append(markdown[fence.body_start : fence.close_start])
        position = (
            fence.close_end + 1
            if markdown[fence.close_end : fence.close_end + 1] == "\n"
            else fence.close_end
        )
    kept.append(markdown[position:])
    return "".join(kept)
