"""A page as the model reads it: Playwright's accessibility snapshot, trimmed and capped.

Playwright's "ai" snapshot (``page.aria_snapshot(mode="ai")``) is YAML-like text of roles, names and
text, with a reference ``[ref=eN]`` on every element; ``page.get_by_ref("eN")`` finds the element again
(Playwright keeps an element's reference while the page lives). The model only acts on interactive
elements, so references stay on those and go from the rest (paragraphs, list items, layout boxes),
which with the cursor hints is about a tenth of the text. A snapshot longer than
``web.browser.max_snapshot_chars`` is cut at a line, with a sentence saying so: a page of ten thousand
rows must not cost a request of a hundred thousand tokens. Pure functions.
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


def capped(text: str, limit: int) -> tuple[str, str | None]:
    """``text`` cut at the last line that fits ``limit`` characters, and the sentence saying so (None when
    nothing was cut)."""
    if len(text) <= limit:
        return text, None
    cut = text.rfind("\n", 0, limit)
    shown = text[: cut if cut > 0 else limit]
    return shown, (
        f"The snapshot was cut at {len(shown):,} of {len(text):,} characters "
        "(web.browser.max_snapshot_chars): scroll, or wait for the text you need, to see more."
    )
