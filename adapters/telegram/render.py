"""Telegram's renderer: Markdown to plain text plus entities, split to 4,096 UTF-16 code units per message.

Sending entities instead of a parse mode means there is nothing to escape and no "can't parse
entities" failure caused by the Markdown. The conversion is the one Signal shares
(``adapters.text.styled``: telegramify-markdown's parse and walk, the model's HTML as written, total,
plain text when it cannot be trusted); Telegram adds only its own rule that a blockquote holds no
blockquote. ``render_telegram`` returns sendable parts and never raises.
"""

from __future__ import annotations

from collections.abc import Iterable

from adapters.base import OutboundText, TextEntity
from adapters.text.entities import split_outbound
from adapters.text.styled import to_entities

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message text
MIN_LIMIT = 2  # room for one astral character, so any text can be split

_QUOTE_TYPES = frozenset({"blockquote", "expandable_blockquote"})


def render_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[OutboundText]:
    """Messages to send for ``markdown``: text plus entities, each text at most ``limit`` UTF-16 units.

    Converts first, then splits the converted text (see ``adapters.text.entities.split_outbound``):
    breaks at paragraphs, then lines, then words, hard cut only inside one over-long word; entities
    crossing a break are clipped into both parts with offsets rebased, so a split ``pre`` stays a
    ``pre`` with its language on both sides. Every entity lies within its part and has length > 0.

    Blank input (empty, whitespace) returns ``[]``: there is no message to send, and whether to say so
    is the caller's business, not the renderer's. ``markdown`` was sanitized by the gateway (valid
    Unicode, no control characters but tab and newline); a character reference the conversion turns
    back into one is masked, so the output always encodes as UTF-8. ``ValueError`` only for ``limit``
    below ``MIN_LIMIT``, whatever the text.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} UTF-16 code units, got {limit}")
    if not markdown.strip():
        return []
    return split_outbound(_format(markdown), limit)


def _format(source: str) -> OutboundText:
    converted = to_entities(source)
    return OutboundText(converted.text, _normalize(converted.entities))


def _normalize(entities: Iterable[TextEntity]) -> tuple[TextEntity, ...]:
    """``entities`` outer before inner, without blockquotes nested in blockquotes.

    telegramify-markdown emits one blockquote entity per ``>`` level, but Telegram does not allow
    blockquotes inside blockquotes; the outermost one already covers the text.
    """
    ordered = sorted(entities, key=lambda e: (e.offset, -e.length))
    kept: list[TextEntity] = []
    quote_end = 0
    for entity in ordered:
        if entity.type in _QUOTE_TYPES:
            if entity.offset < quote_end:
                continue
            quote_end = entity.offset + entity.length
        kept.append(entity)
    return tuple(kept)
