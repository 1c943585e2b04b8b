"""WhatsApp's renderer: Markdown to WhatsApp's own markup, split to the 4,096-character text limit.

WhatsApp styles ``*bold*``, ``_italic_``, ``~strike~``, ```` ```monospace``` ```` blocks, `` `inline
code` ``, ``> quotes`` and ``- `` lists; it has no escapes (``<``, ``&`` and the rest show as written)
and no link markup: it makes a bare address tappable, so ``[label](url)`` becomes ``label (url)``
(the address is what a person needs). A heading is a bold line. A code block has no language: it
becomes an italic caption above the block (WhatsApp would show it as the code's first line).

Split first, convert after (``adapters.text.converted``), like Slack's mrkdwn. Pure and total like
every renderer.
"""

from __future__ import annotations

import re

from adapters.base import OutboundText
from adapters.text.converted import converted_parts
from adapters.text.fences import find_fences

TEXT_LIMIT = 4096  # characters of a text message's body (Cloud API)
MIN_LIMIT = 16  # room for a fence's lines and a caption's first characters

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^(\s{0,3})#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_BOLD_MARK = "\x00"  # stands for a bold asterisk while italics are converted (never in sanitized text)


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
    """One part's Markdown in WhatsApp's markup: code blocks kept (language as a caption), the prose
    around them converted line by line."""
    out: list[str] = []
    position = 0
    for fence in find_fences(markdown):
        out.append(_prose(markdown[position : fence.start]))
        language = fence.opener.strip().lstrip("`~").strip().split(" ")[0]
        body = markdown[fence.body_start : fence.close_start].rstrip("\n")
        caption = f"_{language}_\n" if language else ""
        out.append(f"{caption}```\n{body}\n```")
        position = fence.close_end
    out.append(_prose(markdown[position:]))
    return "".join(out)


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
    """Inline code kept as it is; links, bold, italic and strike converted around it."""
    pieces: list[str] = []
    position = 0
    for match in _CODE_SPAN.finditer(text):
        pieces.append(_styled(text[position : match.start()]))
        pieces.append(f"`{match.group(2)}`")
        position = match.end()
    pieces.append(_styled(text[position:]))
    return "".join(pieces)


def _styled(text: str) -> str:
    text = _AUTOLINK.sub(r"\1", text)
    text = _LINK.sub(
        lambda m: m.group(2) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})", text
    )
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(1) or m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    return text.replace(_BOLD_MARK, "*")
