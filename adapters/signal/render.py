"""Signal's renderer: Markdown to plain text plus style ranges, split to the message limit.

Signal styles ranges of a message's text (``textStyle``: BOLD, ITALIC, STRIKETHROUGH, MONOSPACE,
SPOILER, in UTF-16 units); it shows no links behind words, no underline, no quote and no code
language. So the conversion Telegram's renderer makes too (``adapters.text.styled``: text plus
entities, total, plain text when it cannot be trusted) is followed by Signal's own layout:

- a link whose words are not its address shows the address after them: ``docs (https://…)``;
- a code block's language is an italic caption line above it (``python``), again above each part of
  a block split over several messages, as Slack's renderer does;
- bold, italic, strikethrough and spoiler stay; code spans and blocks are monospace; the rest is text.

Convert first, split after (``adapters.text.entities.split_outbound``, as Telegram's renderer does): a
style crossing a break is clipped into both parts; a part that begins inside a code block gets its
caption again (the split leaves room for the longest). The parts carry :class:`TextEntity` in the
neutral (Telegram) vocabulary, limited to :data:`STYLES`; the adapter names them as Signal does.
Pure and total like every renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from adapters.base import OutboundText, TextEntity
from adapters.text.entities import split_outbound
from adapters.text.styled import to_entities
from adapters.text.units import utf16_len

MIN_LIMIT = 16  # room for a caption and a few characters of code
STYLES = {  # a neutral entity type -> Signal's textStyle
    "bold": "BOLD",
    "italic": "ITALIC",
    "strikethrough": "STRIKETHROUGH",
    "spoiler": "SPOILER",
    "code": "MONOSPACE",
    "pre": "MONOSPACE",
}


def render_signal(markdown: str, limit: int) -> list[OutboundText]:
    """Messages to send for ``markdown``: text plus styles, each at most ``limit`` UTF-16 units.
    ``[]`` for blank text; ``ValueError`` only for a ``limit`` under ``MIN_LIMIT``."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} UTF-16 code units, got {limit}")
    if not markdown.strip():
        return []
    shown = to_styled(markdown)
    languages = [e.language for e in shown.entities if e.type == "pre" and e.language]
    room = min(limit // 4, max((utf16_len(language) + 1 for language in languages), default=0))
    return [_captioned(part, limit) for part in split_outbound(shown, limit - room)]


def _captioned(part: OutboundText, limit: int) -> OutboundText:
    """A part that begins inside a code block gets the block's caption again, when it fits."""
    first = next((e for e in part.entities if e.offset == 0 and e.type == "pre"), None)
    if first is None or not first.language:
        return part
    caption = f"{first.language}\n"
    added = utf16_len(caption)
    if utf16_len(part.text) + added > limit:
        return part
    moved = tuple(replace(e, offset=e.offset + added) for e in part.entities)
    return OutboundText(caption + part.text, (TextEntity("italic", 0, added - 1), *moved))


def to_styled(markdown: str) -> OutboundText:
    """One part's Markdown as Signal shows it (see the module docstring); its plain text when the
    conversion cannot be trusted."""
    converted = to_entities(markdown)
    spans = [
        _Span(e.type, e.offset, e.offset + e.length, e.url or "", e.language or "")
        for e in converted.entities
    ]
    return _laid_out(converted.text, spans)


@dataclass(frozen=True)
class _Span:
    kind: str
    start: int  # UTF-16 units
    end: int
    url: str = ""
    language: str = ""


def _laid_out(text: str, spans: list[_Span]) -> OutboundText:
    """``text`` with link addresses and code captions inserted, and the styles Signal has. An insert
    at a span's start goes before it (a caption before its block), one at its end after it."""
    inserts: list[tuple[int, str, bool]] = []  # (UTF-16 position, text, shown in italics)
    for span in spans:
        if span.kind == "text_link" and span.url and _slice(text, span.start, span.end) != span.url:
            inserts.append((span.end, f" ({span.url})", False))
        elif span.kind == "pre" and span.language:
            inserts.append((span.start, f"{span.language}\n", True))
    inserts.sort(key=lambda item: item[0])

    def before(offset: int, *, inclusive: bool) -> int:
        return sum(
            utf16_len(piece) for at, piece, _ in inserts if at < offset or (inclusive and at == offset)
        )

    styles: list[TextEntity] = []
    pieces: list[str] = []
    position = 0
    for at, piece, italic in inserts:
        pieces += [_slice(text, position, at), piece]
        if italic:
            styles.append(TextEntity("italic", at + before(at, inclusive=False), utf16_len(piece) - 1))
        position = at
    pieces.append(_slice(text, position, utf16_len(text)))
    for span in spans:
        start, end = (
            span.start + before(span.start, inclusive=True),
            span.end + before(span.end, inclusive=False),
        )
        if span.kind in STYLES and end > start:
            styles.append(TextEntity(span.kind, start, end - start, language=span.language or None))
    return OutboundText("".join(pieces), tuple(sorted(styles, key=lambda e: (e.offset, -e.length))))


def _slice(text: str, start: int, end: int) -> str:
    units = text.encode("utf-16-le", "surrogatepass")
    return units[start * 2 : end * 2].decode("utf-16-le", "surrogatepass")
