"""A page as the model reads it: Playwright's accessibility snapshot, trimmed and capped.

Playwright's "ai" snapshot (``page.aria_snapshot(mode="ai")``) is YAML-like text of roles, names and
text, with a reference ``[ref=eN]`` on every element; ``page.get_by_ref("eN")`` finds the element again
(Playwright keeps an element's reference while the page lives). The model only acts on interactive
elements, so references stay on those and go from the rest (paragraphs, list items, layout boxes),
which with the cursor hints is about a tenth of the text. A snapshot longer than
``web.browser.max_snapshot_chars`` is cut at a line, with a sentence saying so and how to read the next
part (``browser_snapshot`` with ``start``): a page of ten thousand rows must not cost a request of a
hundred thousand tokens. (Scrolling does not change the snapshot: it is the whole document, not the
screen.) Pure functions.
"""

from __future__ import annotations

import re

# Roles a person acts on: their references are what browser_click, _type and _select take.
INTERACTIVE_ROLES = frozenset(
    {
        "button",
        "checkbox",
        "combobox",
        "link",
        "listbox",
        "menuitem",
        "menuitemcheckbox",
        "menuitemradio",
        "option",
        "radio",
        "searchbox",
        "slider",
        "spinbutton",
        "switch",
        "tab",
        "textbox",
        "treeitem",
    }
)
_REF = re.compile(r" \[ref=([a-z][a-z0-9]{0,15})\]")
_ROLE = re.compile(r"^\s*- ([a-z]+)\b")
_NOISE = re.compile(r" \[cursor=pointer\]| \[active\]")
REF_FORM = re.compile(r"[a-z][a-z0-9]{0,15}")  # e12; f1e5 once the page navigated


def compact(snapshot: str) -> str:
    """``snapshot`` with references on interactive elements only and without cursor hints."""
    lines = []
    for line in snapshot.splitlines():
        role = _ROLE.match(line)
        if role is None or role.group(1) not in INTERACTIVE_ROLES:
            line = _REF.sub("", line)
        lines.append(_NOISE.sub("", line))
    return "\n".join(lines)


def capped(text: str, limit: int, start: int = 1) -> tuple[str, str | None]:
    """The lines of ``text`` from line ``start`` (1-based) that fit ``limit`` characters, and the sentence
    saying what was left out and how to see the next part (None when everything is shown)."""
    lines = text.splitlines()
    first = min(max(start, 1), max(len(lines), 1))
    shown: list[str] = []
    size = 0
    for line in lines[first - 1 :]:
        if shown and size + len(line) + 1 > limit:
            break
        shown.append(line[:limit])
        size += len(line) + 1
    last = first + len(shown) - 1
    if first == 1 and last >= len(lines):
        return text, None
    more = f"; browser_snapshot with start={last + 1} shows the next part" if last < len(lines) else ""
    return "\n".join(shown), (
        f"Lines {first:,}-{last:,} of the page's {len(lines):,} are shown "
        f"(web.browser.max_snapshot_chars){more}."
    )
