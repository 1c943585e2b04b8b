"""Telegram's renderer: Markdown to plain text plus entities, split to 4,096 UTF-16 code units per message.

Sending entities instead of a parse mode means there is nothing to escape and no "can't parse
entities" failure caused by the Markdown. The conversion is telegramify-markdown's (its parse, then
its walk over pyromark's events; its entities already count UTF-16 code units), with the model's raw
HTML and character references read as the text they were written as (``adapters.text.literal``:
telegramify alone drops the ``<String>`` of ``List<String>``). This module wraps it so our signature
stays stable, and makes it total: whatever the (sanitized, see ``Capabilities.render``) input,
``render_telegram`` returns sendable parts and never raises.

Degradations, each to plain text (the Markdown source, no entities):

- the converter raises;
- its layout would explode (deeply nested lists, huge tables; see ``layout_guard``);
- it renders a non-blank source to blank text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from telegramify_markdown import MessageEntity, RenderConfig
from telegramify_markdown.converter import STANDARD_OPTIONS, EventWalker, _parse

from adapters.base import OutboundText, TextEntity
from adapters.text.controls import mask_controls
from adapters.text.entities import clip_entities, split_outbound
from adapters.text.literal import as_written
from adapters.text.units import utf16_len

from .layout_guard import layout_growth

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

_TELEGRAMIFY_TAGS = frozenset({"<tg-spoiler>", "</tg-spoiler>"})
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
    """``source`` converted to text plus entities, or as plain text when conversion cannot be trusted."""
    try:
        growth = layout_growth(source)
        if growth > _MAX_LAYOUT_GROWTH_PER_CHAR * len(source) + _MAX_LAYOUT_GROWTH_SLACK:
            logger.warning("Markdown layout would add %d characters; sending plain text", growth)
            return OutboundText(source)
        text, entities = convert(source)
    except Exception:
        logger.warning("telegramify-markdown failed; sending plain text", exc_info=True)
        return OutboundText(source)
    if not text.strip():
        return OutboundText(source)
    # Character references are shown as written (``as_written``), so "&#1;" brings no control
    # character back; whatever else might (a LaTeX conversion, say) is masked one for one, which
    # keeps every entity offset valid.
    text = mask_controls(text)
    return OutboundText(text, _normalize(entities, utf16_len(text)))


def convert(source: str) -> tuple[str, list[MessageEntity]]:
    """telegramify-markdown's ``convert`` (the same parse and walk), with HTML and character references
    as written; its own spoiler tags (made of ``||…||``) stay markup."""
    parsed, events = _parse(source, STANDARD_OPTIONS, latex_escape=True)
    walked = as_written(events, parsed, markup=_TELEGRAMIFY_TAGS)
    text, entities, _ = EventWalker(_RENDER_CONFIG, parsed).walk(tuple(walked))
    return text, entities


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
