"""Slack's renderer: Markdown to mrkdwn, split to the message limit in characters.

mrkdwn is not Markdown: ``*bold*``, ``_italic_``, ``~strike~``, ``<url|text>`` links, and ``&``,
``<``, ``>`` escaped as HTML entities (Slack reads ``<…>`` as its own markup, so a model's ``<b>`` must
not become a control sequence). Code blocks are ````` fences without a language: Slack would show
``python`` as the first line of the code, so a fence's language becomes an italic caption above it.

Split first, convert after (``adapters.text.converted``): a split block reopens with its language in
the next part, and a part that grew past the limit (escapes add characters) is split again, smaller.
Pure and total like every renderer.
"""

from __future__ import annotations

import re

from adapters.base import OutboundText
from adapters.text.converted import converted_parts
from adapters.text.fences import find_fences

MIN_LIMIT = 16  # room for the longest escape and a fence caption's first characters

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^(\s{0,3})#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_BOLD_MARK = "\x00"  # stands for a bold asterisk while italics are converted (never in sanitized text)


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
    """One part's Markdown as mrkdwn: code blocks kept (escaped, language as a caption), the prose
    around them converted line by line."""
    out: list[str] = []
    position = 0
    for fence in find_fences(markdown):
        out.append(_prose(markdown[position : fence.start]))
        language = fence.opener.strip().lstrip("`~").strip().split(" ")[0]
        body = markdown[fence.body_start : fence.close_start].rstrip("\n")
        caption = f"_{escape(language)}_\n" if language else ""
        out.append(f"{caption}```\n{escape(body)}\n```")
        position = fence.close_end
    out.append(_prose(markdown[position:]))
    return "".join(out)


def escape(text: str) -> str:
    """The three characters Slack reads as markup, as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _prose(text: str) -> str:
    return "\n".join(_line(line) for line in text.split("\n"))


def _line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        return f"{heading.group(1)}*{_inline(heading.group(2)).replace('*', '').strip()}*"
    bullet = _BULLET.match(line)
    if bullet:
        line = f"{bullet.group(1)}• {line[bullet.end() :]}"
    return _inline(line)


def _inline(text: str) -> str:
    """Inline code kept as it is (escaped); links, bold, italic and strike converted around it."""
    pieces: list[str] = []
    position = 0
    for match in _CODE_SPAN.finditer(text):
        pieces.append(_styled(text[position : match.start()]))
        pieces.append(f"`{escape(match.group(2))}`")
        position = match.end()
    pieces.append(_styled(text[position:]))
    return "".join(pieces)


def _styled(text: str) -> str:
    text = _AUTOLINK.sub(r"\1", text)
    text = escape(text)
    text = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1).replace('|', '¦')}>", text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(1) or m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    return text.replace(_BOLD_MARK, "*")
