"""What the model reads of a fetched body: a page's readable text, a feed's entries, plain text.

A web page is mostly navigation, ads and scripts; trafilatura keeps the article (as Markdown, with the
page's title), which is what the model needs and a fraction of the tokens. A feed becomes a list of
entries, newest first, so a scheduled "summarise my feeds" job reads the same shape from every feed.
PDFs, images and other binaries get one line saying they are not readable here.

The kind of a body is decided from its Content-Type and, where that is vague (XML, ``text/plain``,
none), by sniffing its first bytes. trafilatura and feedparser are synchronous and CPU-bound: callers
run :func:`readable_text` in a thread. The formatting functions are pure.
"""

from __future__ import annotations

import codecs
import datetime as dt
import html
import io
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

MAX_ENTRIES = 30
SUMMARY_CHARS = 300
SNIFF_BYTES = 2048
NO_TEXT = "(no readable text on this page)"

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
FEED_TYPES = frozenset(
    {"application/rss+xml", "application/atom+xml", "application/rdf+xml", "application/feed+json"}
)
VAGUE_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
TEXT_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-ndjson",
        "application/sql",
    }
)
_PROLOG = re.compile(rb"(?:\s+|<\?.*?\?>|<!--.*?-->|<!doctype[^>]*>)*", re.IGNORECASE | re.DOTALL)
_ELEMENT = re.compile(rb"<([a-z_][\w:.-]*)", re.IGNORECASE)
FEED_ROOTS = frozenset({"rss", "feed", "rdf:rdf"})
HTML_ROOTS = frozenset({"html", "head", "body"})
_BLOCK_TAG = re.compile(
    r"<\s*/?\s*(?:p|br|div|li|ul|ol|h[1-6]|tr|td|th|blockquote|pre|table)\b[^>]*>", re.IGNORECASE
)
_TAG = re.compile(r"<[^>]*>")


class Kind(Enum):
    PAGE = "page"
    FEED = "feed"
    TEXT = "text"
    BINARY = "binary"


def is_textual(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in TEXT_APPLICATION_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def root_element(head: bytes) -> str:
    """The name of the first element of an XML or HTML document (lower case), "" when there is none."""
    head = head[:SNIFF_BYTES].removeprefix(codecs.BOM_UTF8)
    prolog = _PROLOG.match(head)
    element = _ELEMENT.match(head, prolog.end() if prolog else 0)
    return element.group(1).decode("ascii").lower() if element else ""


def content_kind(media_type: str, head: bytes) -> Kind:
    """What a body is, from its media type and its first bytes (``head``)."""
    if media_type in HTML_TYPES:
        return Kind.PAGE
    if media_type in FEED_TYPES:
        return Kind.FEED
    vague = media_type in VAGUE_TYPES
    if (vague or is_textual(media_type)) and root_element(head) in FEED_ROOTS:
        return Kind.FEED
    if vague:
        if b"\x00" in head[:SNIFF_BYTES] or head.startswith(b"%PDF"):
            return Kind.BINARY
        return Kind.PAGE if root_element(head) in HTML_ROOTS else Kind.TEXT
    return Kind.TEXT if is_textual(media_type) else Kind.BINARY


def not_readable(url: str, media_type: str) -> str:
    """The one line a PDF, an image or another binary gets."""
    if media_type == "application/pdf":
        what = "a PDF document"
    elif media_type.startswith("image/"):
        what = "an image"
    elif media_type.startswith(("audio/", "video/")):
        what = "audio or video"
    else:
        what = "binary content"
    shown = media_type or "no content type"
    return f"Not readable: {url} is {what} ({shown}); web_fetch reads web pages, feeds and text only."


def decode_text(body: bytes, charset: str | None) -> str:
    """``body`` as text in its declared charset (UTF-8 when none or unknown); bad bytes become U+FFFD."""
    try:
        codec = codecs.lookup(charset or "utf-8").name
    except LookupError:
        codec = "utf-8"
    if codec == "utf-8":
        codec = "utf-8-sig"
    return body.decode(codec, errors="replace")


def page_text(body: bytes, url: str) -> str:
    """A web page's main text as Markdown, under its title; all its text when no article is found."""
    import trafilatura  # loaded on the first page read: a large import most processes never need

    tree = trafilatura.load_html(body)
    if tree is None:  # not HTML after all
        return decode_text(body, None).strip() or NO_TEXT
    text = trafilatura.extract(tree, url=url, output_format="markdown", include_comments=False) or ""
    if not text.strip():
        text = trafilatura.html2txt(tree)
    title = " ".join(
        (trafilatura.extract_metadata(tree, default_url=url, extensive=False).title or "").split()
    )
    body_text = text.strip() or NO_TEXT
    return f"Title: {title}\n\n{body_text}" if title else body_text


@dataclass(frozen=True)
class FeedEntry:
    title: str
    link: str
    published: dt.datetime | None  # UTC
    summary: str  # plain text, short


@dataclass(frozen=True)
class Feed:
    title: str
    entries: tuple[FeedEntry, ...]


def summary_text(markup: str, limit: int = SUMMARY_CHARS) -> str:
    """An entry's HTML summary as one line of plain text, at most ``limit`` characters."""
    text = " ".join(html.unescape(_TAG.sub("", _BLOCK_TAG.sub(" ", markup))).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _utc(parsed: time.struct_time | None) -> dt.datetime | None:
    return dt.datetime(*parsed[:6], tzinfo=dt.UTC) if parsed else None


def _entry(raw: Any) -> FeedEntry:
    return FeedEntry(
        title=" ".join(str(raw.get("title") or "").split()),
        link=str(raw.get("link") or ""),
        published=_utc(raw.get("published_parsed") or raw.get("updated_parsed")),
        summary=summary_text(str(raw.get("summary") or "")),
    )


def parse_feed(body: bytes, url: str) -> Feed | None:
    """The feed in ``body``, or None when it is not one feedparser can read."""
    import feedparser  # loaded on the first feed read

    # A file object, never bytes or a string: feedparser would treat those as a file name or a URL.
    parsed = feedparser.parse(io.BytesIO(body), response_headers={"content-location": url})
    if not parsed.get("version") and not parsed.entries:
        return None
    title = " ".join(str(parsed.feed.get("title") or "").split())
    return Feed(title=title, entries=tuple(_entry(raw) for raw in parsed.entries))


def _timestamp(entry: FeedEntry) -> float:
    return entry.published.timestamp() if entry.published is not None else 0.0


def newest_first(entries: Iterable[FeedEntry]) -> list[FeedEntry]:
    """Dated entries newest first, then undated ones in the feed's order."""
    everything = list(entries)
    dated = sorted((e for e in everything if e.published is not None), key=_timestamp, reverse=True)
    return dated + [e for e in everything if e.published is None]


def format_feed(feed: Feed, limit: int = MAX_ENTRIES) -> str:
    """A feed as a numbered list of entries (title, date, link, summary), newest first."""
    entries = newest_first(feed.entries)
    shown = entries[:limit]
    count = f"{len(entries)} entries"
    if len(shown) < len(entries):
        count = f"the {len(shown)} newest of {count}"
    lines = [f"Feed: {feed.title or '(untitled)'} ({count}, newest first)"]
    for number, entry in enumerate(shown, start=1):
        lines.append("")
        lines.append(f"{number}. {entry.title or '(untitled)'}")
        facts = [entry.published.strftime("%Y-%m-%d %H:%M UTC")] if entry.published else []
        facts += [entry.link] if entry.link else []
        if facts:
            lines.append("   " + " · ".join(facts))
        if entry.summary:
            lines.append(f"   {entry.summary}")
    if not entries:
        lines.append("(no entries)")
    return "\n".join(lines)


def readable_text(kind: Kind, body: bytes, url: str, charset: str | None) -> str:
    """The text the model reads of a PAGE, FEED or TEXT body (synchronous: run it in a thread)."""
    if kind is Kind.PAGE:
        return page_text(body, url)
    if kind is Kind.FEED:
        feed = parse_feed(body, url)
        if feed is not None:
            return format_feed(feed)
    return decode_text(body, charset)
