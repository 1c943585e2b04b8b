"""Splitting formatted text (plain text plus UTF-16 entities) into messages within a limit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from adapters.base import OutboundText, TextEntity
from adapters.text.boundaries import plan_spans
from adapters.text.units import utf16_len, utf16_offsets


def clip_entities(entities: Iterable[TextEntity], start: int, end: int) -> tuple[TextEntity, ...]:
    """The parts of ``entities`` inside the UTF-16 range ``[start, end)``, rebased to ``start``.

    An entity crossing an edge keeps its type, url and language, so a ``pre`` block cut in two is
    a ``pre`` with the same language on both sides: the code block is closed and reopened. Pieces
    of zero length are dropped; everything returned lies within ``[0, end - start]``.
    """
    clipped: list[TextEntity] = []
    for entity in entities:
        low = max(entity.offset, start)
        high = min(entity.offset + entity.length, end)
        if low < high:
            clipped.append(replace(entity, offset=low - start, length=high - low))
    return tuple(clipped)


def split_outbound(message: OutboundText, limit: int) -> list[OutboundText]:
    """Split formatted text into parts of at most ``limit`` UTF-16 code units each.

    Splitting happens after formatting, on the text that is actually sent, so nothing added later
    (escaping, say) can push a part over the limit. Break points and the whitespace invariant are
    those of ``adapters.text.boundaries``; each part carries exactly the message's entities clipped
    to the part's range and rebased (``clip_entities``).
    """
    text = message.text
    offsets = utf16_offsets(text)
    return [
        OutboundText(
            text[span.start : span.end],
            clip_entities(message.entities, offsets[span.start], offsets[span.end]),
        )
        for span in plan_spans(text, limit, utf16_len)
    ]


def plain_fallback(part: OutboundText) -> OutboundText:
    """The same text without entities, for when a platform rejects a part's formatting.

    The text is unchanged, so it stays within the limit it was split for; its buttons stay with it.
    """
    return OutboundText(part.text, buttons=part.buttons)
