"""Markdown to the "star" markups: ``*bold*``, ``_italic_``, ``~strike~``, ```` ``` ```` blocks.

Slack's mrkdwn and WhatsApp's markup style text the same way and differ only in two things, which a
:class:`StarMarkup` names: what must be escaped (Slack reads ``&``, ``<`` and ``>`` as its own markup;
WhatsApp has no escapes) and how a link is written (Slack's ``<url|label>``; WhatsApp has no link
markup, so ``label (url)``). Everything else is converted once, here: a heading becomes a bold line, a
list item a ``•`` line, a fence's language an italic caption above the block (both would show it as
the code's first line), inline code is kept. One part at a time (split first: ``adapters.text.converted``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from adapters.text.fences import find_fences

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^(\s{0,3})#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_BOLD_MARK = "\x00"  # stands for a bold asterisk while italics are converted (never in sanitized text)


@dataclass(frozen=True)
class StarMarkup:
    """What one star markup does its own way: ``escape`` (applied to all text, code included) and
    ``link(label, url)`` (given the escaped label and address)."""

    escape: Callable[[str], str]
    link: Callable[[str, str], str]


def to_star_marks(markdown: str, markup: StarMarkup) -> str:
    """One part's Markdown in ``markup``: code blocks kept (escaped, language as a caption), the prose
    around them converted line by line."""
    escape = markup.escape
    out: list[str] = []
    position = 0
    for fence in find_fences(markdown):
        out.append(_prose(markdown[position : fence.start], markup))
        language = fence.opener.strip().lstrip("`~").strip().split(" ")[0]
        body = markdown[fence.body_start : fence.close_start].rstrip("\n")
        caption = f"_{escape(language)}_\n" if language else ""
        out.append(f"{caption}```\n{escape(body)}\n```")
        position = fence.close_end
    out.append(_prose(markdown[position:], markup))
    return "".join(out)


def _prose(text: str, markup: StarMarkup) -> str:
    return "\n".join(_line(line, markup) for line in text.split("\n"))


def _line(line: str, markup: StarMarkup) -> str:
    heading = _HEADING.match(line)
    if heading:
        return f"{heading.group(1)}*{_inline(heading.group(2), markup).replace('*', '').strip()}*"
    bullet = _BULLET.match(line)
    if bullet:
        line = f"{bullet.group(1)}• {line[bullet.end() :]}"
    return _inline(line, markup)


def _inline(text: str, markup: StarMarkup) -> str:
    """Inline code kept as it is (escaped); links, bold, italic and strike converted around it."""
    pieces: list[str] = []
    position = 0
    for match in _CODE_SPAN.finditer(text):
        pieces.append(_styled(text[position : match.start()], markup))
        pieces.append(f"`{markup.escape(match.group(2))}`")
        position = match.end()
    pieces.append(_styled(text[position:], markup))
    return "".join(pieces)


def _styled(text: str, markup: StarMarkup) -> str:
    text = _AUTOLINK.sub(r"\1", text)
    text = markup.escape(text)
    text = _LINK.sub(lambda m: markup.link(m.group(1), m.group(2)), text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(1) or m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    return text.replace(_BOLD_MARK, "*")
