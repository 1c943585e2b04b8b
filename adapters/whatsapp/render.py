"""WhatsApp's renderer: Markdown to WhatsApp's own markup, split to the 4,096-character text limit.

WhatsApp styles ``*bold*``, ``_italic_``, ``~strike~``, ```` ```monospace``` ```` blocks, `` `inline
code` ``, ``> quotes`` and ``- `` lists; it has no escapes (``<``, ``&`` and the rest show as written)
and no link markup: it makes a bare address tappable, so ``[label](url)`` becomes ``label (url)``
(the address is what a person needs). A heading is a bold line. A code block has no language: it
becomes an italic caption above the block (WhatsApp would show it as the code's first line).

The conversion is the star markups' (``adapters.text.star_marks``), with no escapes and links as
``label (url)``. Split first, convert after (``adapters.text.converted``), like Slack's mrkdwn. Pure
and total like every renderer.
"""

from __future__ import annotations

from adapters.base import OutboundText
from adapters.text.converted import converted_parts
from adapters.text.star_marks import StarMarkup, to_star_marks

TEXT_LIMIT = 4096  # characters of a text message's body (Cloud API)
MIN_LIMIT = 16  # room for a fence's lines and a caption's first characters


def _link(label: str, url: str) -> str:
    return url if label == url else f"{label} ({url})"


WHATSAPP_MARKUP = StarMarkup(escape=lambda text: text, link=_link)


def render_whatsapp(markdown: str, limit: int) -> list[OutboundText]:
    """Messages to send for ``markdown`` in WhatsApp's markup, each at most ``limit`` characters.
    ``[]`` for blank text; ``ValueError`` only for a ``limit`` under ``MIN_LIMIT``."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters, got {limit}")
    if not markdown.strip():
        return []
    return [
        OutboundText(part) for part in converted_parts(markdown, limit, to_whatsapp, smallest=MIN_LIMIT // 4)
    ]


def to_whatsapp(markdown: str) -> str:
    """One part's Markdown in WhatsApp's markup (a fence's language as a caption)."""
    return to_star_marks(markdown, WHATSAPP_MARKUP)
