"""Markdown to the HTML of a Matrix message's ``formatted_body`` (``org.matrix.custom.html``), safely.

The HTML is built here, tag by tag, from pulldown-cmark's events (``pyromark``): only tags of the
Matrix spec's allowed list come out, raw HTML in the model's text is shown as text (never markup),
and a link keeps its target only for http(s), mailto and matrix.to (an image becomes a link: clients
show only ``mxc://`` images). Character references (``&amp;``) are shown as written, like the raw HTML
(``adapters.text.literal``). Pure and total: any text gives HTML.
"""

from __future__ import annotations

from html import escape
from typing import Any

import pyromark

from adapters.text.literal import as_written

OPTIONS = (
    pyromark.Options.ENABLE_STRIKETHROUGH | pyromark.Options.ENABLE_TABLES | pyromark.Options.ENABLE_TASKLISTS
)
SAFE_SCHEMES = ("http://", "https://", "mailto:", "matrix:")

# Start/End event name -> tag (names with data are handled in ``_open``).
_SIMPLE = {
    "Paragraph": "p",
    "Emphasis": "em",
    "Strong": "strong",
    "Strikethrough": "del",
    "BlockQuote": "blockquote",
    "Item": "li",
    "TableRow": "tr",
}
ALLOWED_TAGS = frozenset(
    [
        "p",
        "em",
        "strong",
        "del",
        "blockquote",
        "li",
        "ul",
        "ol",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "code",
        "a",
        "br",
        "hr",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
    ]
)


def to_html(markdown: str) -> str:
    """``markdown`` as Matrix HTML (see the module docstring)."""
    out: list[str] = []
    stack: list[str] = []  # open tags, innermost last
    head = False  # inside a table's head row: cells are <th>
    events = pyromark.events_with_range(markdown, options=OPTIONS)
    for event, _ in as_written(events, markdown, links=SAFE_SCHEMES):
        if isinstance(event, str):
            out.append({"SoftBreak": "<br>", "HardBreak": "<br>", "Rule": "<hr>"}.get(event, ""))
            continue
        [(kind, value)] = event.items()
        if kind == "Start":
            if _name(value) == "TableHead":
                head = True
            tag, opening = _open(value, head)
            stack.append(tag)
            out.append(opening)
        elif kind == "End":
            if _name(value) == "TableHead":
                head = False
            if stack:
                out.append(_closing(stack.pop()))
        elif kind in ("Text", "InlineMath", "DisplayMath", "FootnoteReference"):
            out.append(escape(str(value), quote=False))
        elif kind == "Code":
            out.append(f"<code>{escape(str(value), quote=False)}</code>")
        elif kind == "TaskListMarker":
            out.append("☑ " if value else "☐ ")
    return "".join(out).rstrip("\n")


def _name(value: Any) -> str:
    return value if isinstance(value, str) else next(iter(value))


def _open(value: Any, head: bool) -> tuple[str, str]:
    """The tag an opening event stands for ("" for none), and its opening HTML."""
    name = _name(value)
    if name in _SIMPLE:
        tag = _SIMPLE[name]
        return tag, f"<{tag}>"
    data = value[name] if isinstance(value, dict) else None
    if name == "Heading":
        level = int(str(data["level"])[1:]) if isinstance(data, dict) else 1
        return f"h{level}", f"<h{level}>"
    if name == "List":
        if data is None:
            return "ul", "<ul>"
        return "ol", "<ol>" if data == 1 else f'<ol start="{int(data)}">'
    if name == "CodeBlock":
        language = data.get("Fenced", "") if isinstance(data, dict) else ""
        language = (
            "".join(c for c in str(language).split()[0] if c.isalnum() or c in "+-_#.")
            if language.strip()
            else ""
        )
        attribute = f' class="language-{language}"' if language else ""
        return "pre", f"<pre><code{attribute}>"
    if name in ("Link", "Image"):
        url = str(data.get("dest_url", "")) if isinstance(data, dict) else ""
        if url.lower().startswith(SAFE_SCHEMES):
            return "a", f'<a href="{escape(url, quote=True)}">'
        return "", ""
    if name == "TableHead":
        return "thead", "<thead><tr>"
    if name == "Table":
        return "table", "<table>"
    if name == "TableCell":
        return ("th", "<th>") if head else ("td", "<td>")
    return "", ""  # footnotes, metadata: their text is escaped, no tag


def _closing(tag: str) -> str:
    if tag == "pre":
        return "</code></pre>"
    if tag == "thead":
        return "</tr></thead>"
    return f"</{tag}>" if tag else ""
