"""Markdown to plain text plus formatting entities: the conversion Telegram's and Signal's renderers share.

Both platforms style ranges of a plain text (UTF-16 units) instead of reading a markup, so both
convert with telegramify-markdown's parse and its walk over pyromark's events, the model's raw HTML
and character references read as written (``adapters.text.literal``: telegramify alone drops the
``<String>`` of ``List<String>``). What each platform then does with the entities (Telegram folds
nested quotes, Signal shows link addresses and code captions) stays in its own renderer.

Total: whatever the (sanitized) input, :func:`to_entities` returns text to send. It degrades to the
Markdown source as plain text (no entities) when the converter raises, when its layout would explode
(deeply nested lists, huge tables; ``layout_guard``) or when it renders a non-blank source blank.
"""

from __future__ import annotations

import logging

from telegramify_markdown import MessageEntity, RenderConfig
from telegramify_markdown.converter import STANDARD_OPTIONS, EventWalker, _parse

from adapters.base import OutboundText, TextEntity
from adapters.text.controls import mask_controls
from adapters.text.entities import clip_entities
from adapters.text.layout_guard import layout_growth
from adapters.text.literal import as_written
from adapters.text.units import utf16_len

logger = logging.getLogger(__name__)

# A private config: telegramify's default one is process-global and mutable, and a change made
# elsewhere (heading symbols, say) must not change what Herald sends.
_RENDER_CONFIG = RenderConfig.isolated()

# Layout may add this many characters per source character, plus a constant, before the text is
# sent as plain text instead. Ordinary tables and lists stay far below it.
_MAX_LAYOUT_GROWTH_PER_CHAR = 4
_MAX_LAYOUT_GROWTH_SLACK = 100_000

_SPOILER_TAGS = frozenset({"<tg-spoiler>", "</tg-spoiler>"})  # telegramify's own markup for ``||…||``


def to_entities(markdown: str) -> OutboundText:
    """``markdown`` as text plus neutral entities (Telegram's vocabulary, in range, length > 0), or
    as plain text when the conversion cannot be trusted (see the module docstring)."""
    try:
        growth = layout_growth(markdown)
        if growth > _MAX_LAYOUT_GROWTH_PER_CHAR * len(markdown) + _MAX_LAYOUT_GROWTH_SLACK:
            logger.warning("Markdown layout would add %d characters; sending plain text", growth)
            return OutboundText(markdown)
        text, entities = convert(markdown)
    except Exception:
        logger.warning("Converting Markdown to entities failed; sending plain text", exc_info=True)
        return OutboundText(markdown)
    if not text.strip():
        return OutboundText(markdown)
    # Character references are shown as written (``as_written``), so "&#1;" brings no control
    # character back; whatever else might (a LaTeX conversion, say) is masked one for one, which
    # keeps every entity offset valid.
    text = mask_controls(text)
    return OutboundText(text, tuple(clip_entities(_neutral(entities), 0, utf16_len(text))))


def convert(markdown: str) -> tuple[str, list[MessageEntity]]:
    """telegramify-markdown's ``convert`` (the same parse and walk), with HTML and character references
    as written; its own spoiler tags (made of ``||…||``) stay markup."""
    parsed, events = _parse(markdown, STANDARD_OPTIONS, latex_escape=True)
    walked = as_written(events, parsed, markup=_SPOILER_TAGS)
    text, entities, _ = EventWalker(_RENDER_CONFIG, parsed).walk(tuple(walked))
    return text, entities


def _neutral(entities: list[MessageEntity]) -> list[TextEntity]:
    return [
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
