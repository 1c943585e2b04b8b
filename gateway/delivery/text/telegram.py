"""Telegram: Markdown to plain text plus entities, split to 4,096 UTF-16 code units per message.

Sending entities instead of a parse mode means there is nothing to escape and no "can't parse
entities" failure caused by the Markdown. The conversion is telegramify-markdown's ``convert``
(its entities already count UTF-16 code units); this module wraps it so our signature stays stable,
and makes it total: whatever the input, ``render_telegram`` returns sendable parts and never raises.

Degradations, each to plain text (the sanitized Markdown source, no entities):

- the converter raises;
- its layout would explode (deeply nested lists, huge tables; see ``gateway.delivery.text.layout_guard``);
- it renders a non-blank source to blank text (an answer made only of an HTML block, say).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from telegramify_markdown import MessageEntity, RenderConfig, convert

from adapters.base import OutboundText, TextEntity
from gateway.delivery.text.entities import clip_entities, split_outbound
from gateway.delivery.text.layout_guard import layout_growth
from gateway.delivery.text.sanitize import mask_controls, sanitize_text
from gateway.delivery.text.units import utf16_len

logger = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message text
MIN_LIMIT = 2  # room for one astral character, so any text can be split

# A private config: telegramify's default one is process-global and mutable, and a change made
# elsewhere (heading symbols, say) must not change what Herald sends.
_RENDER_CONFIG = RenderConfig.isolated()

# Layout may add this many characters per source character, plus a constant, before the text is
# sent as plain text instead. Ordinary tables and lists stay far below it.
_MAX_LAYOUT_GROWTH_PER_CHAR = 4
_MAX_LAYOUT_GROWTH_SLACK = 100_000

_QUOTE_TYPES = frozenset({"blockquote", "expandable_blockquote"})


def render_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[OutboundText]:
    """Messages to send for ``markdown``: text plus entities, each text at most ``limit`` UTF-16 units.

    Converts first, then splits the converted text (see ``gateway.delivery.text.entities.split_outbound``):
    breaks at paragraphs, then lines, then words, hard cut only inside one over-long word; entities
    crossing a break are clipped into both parts with offsets rebased, so a split ``pre`` stays a
    ``pre`` with its language on both sides. Every entity lies within its part and has length > 0.

    Blank input (empty, whitespace, nothing but control characters) returns ``[]``: there is no
    message to send, and whether to say so is the caller's business, not the renderer's. The input is
    sanitized first (lone surrogates become U+FFFD, control characters other than tab and newline
    are dropped), so the output always encodes as UTF-8. ``ValueError`` only for ``limit`` below
    ``MIN_LIMIT``, whatever the text.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} UTF-16 code units, got {limit}")
    source = sanitize_text(markdown)
    if not source.strip():
        return []
    return split_outbound(_format(source), limit)


def plain_fallback(part: OutboundText) -> OutboundText:
    """The same text without entities, for when Telegram rejects a part's formatting.

    The text is unchanged, so it stays within the limit it was split for.
    """
    return OutboundText(part.text, buttons=part.buttons)


def _format(source: str) -> OutboundText:
    """``source`` converted to text plus entities, or as plain text when conversion cannot be trusted."""
    try:
        growth = layout_growth(source)
        if growth > _MAX_LAYOUT_GROWTH_PER_CHAR * len(source) + _MAX_LAYOUT_GROWTH_SLACK:
            logger.warning("Markdown layout would add %d characters; sending plain text", growth)
            return OutboundText(source)
        text, entities = convert(source, config=_RENDER_CONFIG)
    except Exception:
        logger.warning("telegramify-markdown failed; sending plain text", exc_info=True)
        return OutboundText(source)
    if not text.strip():
        return OutboundText(source)
    # Character references such as "&#1;" can bring control characters back; masking them one for
    # one keeps every entity offset valid.
    text = mask_controls(text)
    return OutboundText(text, _normalize(entities, utf16_len(text)))


def _normalize(entities: Iterable[MessageEntity], text_length: int) -> tuple[TextEntity, ...]:
    """Neutral entities, in range, outer before inner, without blockquotes nested in blockquotes.

    telegramify-markdown emits one blockquote entity per ``>`` level, but Telegram does not allow
    blockquotes inside blockquotes; the outermost one already covers the text.
    """
    neutral = [
        TextEntity(
            type=entity.type,
            offset=entity.offset,
            length=entity.length,
            url=entity.url,
            language=entity.language,
            custom_emoji_id=entity.custom_emoji_id,
        )
        for entity in entities
    ]
    ordered = sorted(clip_entities(neutral, 0, text_length), key=lambda e: (e.offset, -e.length))
    kept: list[TextEntity] = []
    quote_end = 0
    for entity in ordered:
        if entity.type in _QUOTE_TYPES:
            if entity.offset < quote_end:
                continue
            quote_end = entity.offset + entity.length
        kept.append(entity)
    return tuple(kept)
