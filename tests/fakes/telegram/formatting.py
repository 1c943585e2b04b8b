"""Message formatting as Telegram checks it: HTML, MarkdownV2, explicit entities, detected entities.

The HTML parser accepts exactly the tags Telegram supports and reports the errors Telegram reports
(``Unsupported start tag "br" at byte offset 5`` ...); it returns the rendered text and entities, so
a test sees what a user would. MarkdownV2 is only checked for unescaped reserved characters (the
common real failure) and kept as sent. All offsets and lengths are UTF-16 code units.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from .wire import ApiError, bad_request, utf16_len

ENTITY_TYPES = frozenset(
    {
        "mention",
        "hashtag",
        "cashtag",
        "bot_command",
        "url",
        "email",
        "phone_number",
        "bold",
        "italic",
        "underline",
        "strikethrough",
        "spoiler",
        "blockquote",
        "expandable_blockquote",
        "code",
        "pre",
        "text_link",
        "text_mention",
        "custom_emoji",
    }
)

HTML_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}

_ATTR = re.compile(r"""([a-zA-Z][\w-]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_HTML_ENTITY = re.compile(r"&(lt|gt|amp|quot|#\d+|#[xX][0-9a-fA-F]+);")
_MDV2_RESERVED = frozenset(".!#+-={}()>")
_COMMAND = re.compile(r"(?<![\w/])/[a-zA-Z0-9_]{1,32}(?:@[a-zA-Z0-9_]{3,32})?(?![\w/])")
_MENTION = re.compile(r"(?<![\w@])@[a-zA-Z0-9_]{4,32}(?!\w)")


def cant_parse(detail: str) -> ApiError:
    return bad_request(f"can't parse entities: {detail}")


@dataclass
class _Open:
    tag: str
    start: int  # UTF-16 offset in the rendered text
    attrs: dict[str, str]
    language: str | None = None  # a <code class="language-x"> inside <pre>


@dataclass
class _Rendered:
    parts: list[str] = field(default_factory=list)
    length: int = 0  # UTF-16 units so far

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.length += utf16_len(text)


def parse_html(source: str) -> tuple[str, list[dict[str, Any]]]:
    """Render Telegram HTML to (text, entities) or raise 400 can't parse entities."""
    out = _Rendered()
    stack: list[_Open] = []
    entities: list[dict[str, Any]] = []
    i = 0
    while i < len(source):
        char = source[i]
        if char == "&":
            match = _HTML_ENTITY.match(source, i)
            out.add(html.unescape(match.group(0)) if match else "&")
            i = match.end() if match else i + 1
            continue
        if char != "<":
            out.add(char)
            i += 1
            continue
        byte_offset = len(source[:i].encode())
        end = source.find(">", i)
        if end < 0:
            raise cant_parse(f"Unclosed start tag at byte offset {byte_offset}")
        inner = source[i + 1 : end].strip()
        i = end + 1
        if inner.startswith("/"):
            name = inner[1:].strip().lower()
            if not stack:
                raise cant_parse(f"Unexpected end tag at byte offset {byte_offset}")
            top = stack.pop()
            if name != top.tag:
                raise cant_parse(
                    f'Unmatched end tag at byte offset {byte_offset}, expected "</{top.tag}>", '
                    f'found "</{name}>"'
                )
            _close(top, out.length, stack, entities)
            continue
        name, _, rest = inner.partition(" ")
        name = name.lower().rstrip("/")
        if name not in HTML_TAGS:
            raise cant_parse(f'Unsupported start tag "{name}" at byte offset {byte_offset}')
        attrs = {
            m.group(1).lower(): html.unescape(m.group(2) or m.group(3) or m.group(4) or "")
            for m in _ATTR.finditer(rest)
        }
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise cant_parse(f'Tag "span" must have class "tg-spoiler" at byte offset {byte_offset}')
        stack.append(_Open(name, out.length, attrs))
    if stack:
        raise cant_parse(f'Can\'t find end tag corresponding to start tag "{stack[-1].tag}"')
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out.parts), entities


def _close(top: _Open, end: int, stack: list[_Open], entities: list[dict[str, Any]]) -> None:
    kind = HTML_TAGS[top.tag]
    language = top.attrs.get("class", "").removeprefix("language-") if top.tag == "code" else ""
    if kind == "code" and language and stack and stack[-1].tag == "pre":
        stack[-1].language = language  # <pre><code class="language-x">: one pre entity
        return
    if end <= top.start:
        return  # empty entities vanish
    entity: dict[str, Any] = {"type": kind, "offset": top.start, "length": end - top.start}
    if kind == "text_link":
        if not top.attrs.get("href"):
            return
        entity["url"] = top.attrs["href"]
    elif kind == "pre" and top.language:
        entity["language"] = top.language
    elif kind == "blockquote" and "expandable" in top.attrs:
        entity["type"] = "expandable_blockquote"
    elif kind == "custom_emoji":
        entity["custom_emoji_id"] = top.attrs.get("emoji-id", "")
    entities.append(entity)


def check_markdown_v2(source: str) -> None:
    """Reject unescaped reserved characters outside code spans and link targets."""
    i, in_code, in_pre, in_url = 0, False, False, False
    line_start = True
    while i < len(source):
        char = source[i]
        if char == "\\":
            i, line_start = i + 2, False
            continue
        if source.startswith("```", i) and not in_code:
            in_pre, i = not in_pre, i + 3
            continue
        if char == "`" and not in_pre:
            in_code, i = not in_code, i + 1
            continue
        if in_code or in_pre:
            i, line_start = i + 1, char == "\n"
            continue
        if in_url:
            in_url = char != ")"
        elif source.startswith("](", i):
            in_url, i = True, i + 2
            continue
        elif char in _MDV2_RESERVED and not (char == ">" and line_start):
            raise cant_parse(f"Character '{char}' is reserved and must be escaped with the preceding '\\'")
        i, line_start = i + 1, char == "\n"
    if in_code or in_pre:
        raise cant_parse(f"Can't find end of Pre entity at byte offset {len(source.encode())}")


def check_entities(text: str, entities: Any) -> list[dict[str, Any]]:
    """Validate explicit ``entities`` against ``text``; returns them sorted, empty ones dropped."""
    if not isinstance(entities, list):
        raise cant_parse("entities must be an array")
    size = utf16_len(text)
    kept: list[dict[str, Any]] = []
    for entity in entities:
        if not isinstance(entity, dict):
            raise cant_parse("entity must be an object")
        kind, offset, length = entity.get("type"), entity.get("offset"), entity.get("length")
        if kind not in ENTITY_TYPES:
            raise cant_parse(f'unsupported entity type "{kind}"')
        if not isinstance(offset, int) or not isinstance(length, int) or offset < 0:
            raise cant_parse(f"wrong entity offset/length {offset!r}/{length!r}")
        if length <= 0:
            continue
        if offset + length > size:
            raise cant_parse(
                f"entity {kind} at offset {offset} with length {length} is beyond the end of the text "
                f"({size} UTF-16 code units)"
            )
        if kind == "text_link" and not entity.get("url"):
            raise cant_parse("text_link entity has no url")
        kept.append(dict(entity))
    kept.sort(key=lambda e: (e["offset"], -e["length"]))
    return kept


def detect_entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram itself adds to an incoming text: bot commands and @mentions."""
    found: list[dict[str, Any]] = []
    for kind, pattern in (("bot_command", _COMMAND), ("mention", _MENTION)):
        for match in pattern.finditer(text):
            offset = utf16_len(text[: match.start()])
            found.append({"type": kind, "offset": offset, "length": utf16_len(match.group(0))})
    found.sort(key=lambda e: e["offset"])
    return found
