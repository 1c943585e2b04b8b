"""Slack's renderer: Markdown to mrkdwn, split to the message limit in characters.

mrkdwn is not Markdown: ``*bold*``, ``_italic_``, ``~strike~``, ``<url|text>`` links, and ``&``,
``<``, ``>`` escaped as HTML entities (Slack reads ``<…>`` as its own markup, so a model's ``<b>`` must
not become a control sequence). Code blocks are ````` fences without a language: Slack would show
``python`` as the first line of the code, so a fence's language becomes an italic caption above it.

The conversion is the star markups' (``adapters.text.star_marks``), with Slack's escapes and links.
Split first, convert after (``adapters.text.converted``): a split block reopens with its language in
the next part, and a part that grew past the limit (escapes add characters) is split again, smaller.
Pure and total like every renderer.
"""

from __future__ import annotations

from adapters.base import OutboundText
from adapters.text.converted import converted_parts
from adapters.text.star_marks import StarMarkup, to_star_marks

MIN_LIMIT = 16  # room for the longest escape and a fence caption's first characters


def escape(text: str) -> str:
    """The three characters Slack reads as markup, as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


MRKDWN = StarMarkup(escape=escape, link=lambda label, url: f"<{url}|{label.replace('|', '¦')}>")


def render_slack(markdown: str, limit: int) -> list[OutboundText]:
    """Messages to send for ``markdown``: mrkdwn, each at most ``limit`` characters. ``[]`` for blank
    text; ``ValueError`` only for a ``limit`` under ``MIN_LIMIT``."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters, got {limit}")
    if not markdown.strip():
        return []
    parts = converted_parts(markdown, limit, to_mrkdwn, smallest=MIN_LIMIT // 4)
    return [OutboundText(part) for part in parts]


def to_mrkdwn(markdown: str) -> str:
    """One part's Markdown as mrkdwn (code escaped, a fence's language as a caption)."""
    return to_star_marks(markdown, MRKDWN)
