"""Discord: Markdown passes through, sanitized and split to 2,000 characters."""

from __future__ import annotations

from gateway.text.sanitize import sanitize_text
from gateway.text.split import split_markdown

DISCORD_LIMIT = 2000


def render_discord(markdown: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """Messages to send for ``markdown``: sanitized, then ``split_markdown`` at ``limit`` characters.

    Discord renders Markdown itself, so nothing is converted. Sanitizing first matters because a
    lone surrogate cannot be encoded into the request body at all. ``[]`` when there is nothing
    to send.
    """
    return split_markdown(sanitize_text(markdown), limit)
