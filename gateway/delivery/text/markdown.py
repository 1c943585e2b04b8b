"""Platforms that render Markdown themselves (Discord, the terminal): sanitized, then split."""

from __future__ import annotations

from collections.abc import Callable

from gateway.delivery.text.sanitize import sanitize_text
from gateway.delivery.text.split import split_markdown


def render_markdown(markdown: str, limit: int, measure: Callable[[str], int] = len) -> list[str]:
    """Messages to send for ``markdown``: sanitized, then ``split_markdown`` at ``limit``.

    Nothing is converted: the platform renders Markdown. Sanitizing first matters because a lone
    surrogate cannot be encoded into a request body at all, and control characters or CR line
    endings show as garbage. ``[]`` when there is nothing to send.
    """
    return split_markdown(sanitize_text(markdown), limit, measure)
