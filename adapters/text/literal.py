"""Markdown's raw HTML and character references, shown as the text they were written as.

CommonMark gives ``<`` and ``&`` a second meaning: in ``List<String>`` the ``<String>`` is an inline
HTML tag, ``<script>`` at a line's start opens an HTML block, ``&lt;`` names the character ``<``. A
renderer that drops HTML (Telegram has none) turns ``List<String>`` into ``List``; one that decodes
references shows ``<`` where the model wrote ``&lt;``. No platform we render for takes the model's
HTML as markup, so the renderers built on pyromark's events (Telegram's, Matrix's) read them through
:func:`as_written`: a coding assistant's ``<br>``, ``Vec<u8>`` and ``&amp;`` reach the person as
written. The parse itself is kept, so code spans, code blocks, math and links stay what they are.

An autolink is CommonMark's too: ``<https://example.com>`` is a link whose brackets are syntax, but
so is ``<id:123>`` (any two-letter scheme), which a model means as text. An autolink stays a link only
when the platform links its scheme (``links``); an address (``<me@example.com>``) becomes a
``mailto:`` link where the platform links those, else the address as text (Telegram and Signal
link an address in text themselves); any other is text with its brackets, as written.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from pyromark.event import Range as Span  # a UTF-8 byte range of the parsed Markdown

# A character reference as CommonMark reads one: named, decimal or hexadecimal.
REFERENCE = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{0,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")

Event = Any  # a pyromark event: a name ("SoftBreak") or a one-key dict ({"Text": "..."})

WEB_LINKS = ("http://", "https://")  # the schemes every platform links
_AUTOLINKS = frozenset({"Autolink", "Email"})


def as_written(
    events: Iterable[tuple[Event, Span]],
    markdown: str,
    markup: Collection[str] = (),
    links: tuple[str, ...] = WEB_LINKS,
) -> Iterator[tuple[Event, Span]]:
    """``events`` (``pyromark.events_with_range`` of ``markdown``), with what was written as HTML or
    as a character reference turned into text events of exactly what was written:

    - an HTML block becomes a paragraph of its lines (a soft break between lines);
    - inline HTML becomes text, except the tags in ``markup`` (lowercase, compared stripped): a
      renderer's own markup, such as the ``<tg-spoiler>`` telegramify-markdown makes of ``||…||``;
    - a character reference stays the reference (``&amp;``), not the character it names;
    - an autolink stays a link when its address starts with one of ``links`` (lowercase schemes
      with their separator, ``"mailto:"`` for addresses), else it is text (see the module).

    Every other event passes unchanged, so backslash escapes, code and links read as before.
    """
    source = markdown.encode("utf-8")
    line_ended = False  # the HTML block's last line ended with a line break: one more line may follow
    unlinked: str | None = None  # inside an autolink shown as text: what to show (at its end)
    for event, span in events:
        if unlinked is not None:
            if isinstance(event, dict) and event.get("End") == "Link":
                yield {"Text": unlinked}, span
                unlinked = None
            continue
        if not isinstance(event, dict):
            yield event, span
        elif (link := _autolink(event)) is not None:
            address, email = link
            target = f"mailto:{address}" if email else address
            if target.lower().startswith(links):
                yield {"Start": {"Link": {**event["Start"]["Link"], "dest_url": target}}}, span
            else:
                unlinked = address if email else _written(source, span)
        elif event.get("Start") == "HtmlBlock":
            line_ended = False
            yield {"Start": "Paragraph"}, span
        elif event.get("End") == "HtmlBlock":
            yield {"End": "Paragraph"}, span
        elif "Html" in event:
            line = str(event["Html"])
            if line_ended:
                yield "SoftBreak", span
            if line.rstrip("\n"):
                yield {"Text": line.rstrip("\n")}, span
            line_ended = line.endswith("\n")
        elif "InlineHtml" in event and str(event["InlineHtml"]).strip().lower() not in markup:
            yield {"Text": str(event["InlineHtml"])}, span
        elif "Text" in event and REFERENCE.fullmatch(written := _written(source, span)):
            yield {"Text": written}, span
        else:
            yield event, span


def _autolink(event: dict[str, Any]) -> tuple[str, bool] | None:
    """An autolink's address and whether it is an email address; None for any other event."""
    start = event.get("Start")
    link = start.get("Link") if isinstance(start, dict) else None
    if not isinstance(link, dict) or link.get("link_type") not in _AUTOLINKS:
        return None
    return str(link.get("dest_url", "")), link.get("link_type") == "Email"


def _written(source: bytes, span: Span) -> str:
    return source[span["start"] : span["end"]].decode("utf-8", "replace")
