"""Discord's renderer: the Markdown as it is, except the ``<…>`` tags Discord shows as something else.

Discord reads ``<@123>`` as a user, ``<@&123>`` as a role, ``<#123>`` as a channel's name,
``<t:1700000000:R>`` as a date, ``<:name:123>`` as an emoji image and ``</cmd:123>`` as a command:
a model writing about Discord's syntax would have it replaced by what it names (``allowed_mentions``
keeps any of them from pinging; it does not keep them from being replaced). So a ``<`` that could
open such a tag is shown as written with a backslash before it (Discord shows ``\\<#123>`` as
``<#123>``) - outside code only, where backslashes show as written.

"Outside code" as Discord reads it: a code block is ````` … ````` anywhere (not ``~~~``, not indented
lines), a code span a backtick run closed by the same run, and a backslash escapes the character
after it. A ``<`` the model already escaped is left alone; one after an escaped backslash (``\\\\``) is
escaped again. Split first, escape after (``adapters.text.converted``): a part that grew past the
limit is split again, so no part leaves over it. Pure and total like every renderer.
"""

from __future__ import annotations

import re

from adapters.base import OutboundText
from adapters.text.converted import converted_parts

MIN_LIMIT = 8  # a split part still has room for the backslashes its tags gain

# Discord's own rules, tried in this order at each position (as its Markdown parser does).
_CODE_BLOCK = re.compile(r"```(?:[a-z0-9-]+?\n+)?\n*[\s\S]+?\n*```", re.I)
_ESCAPE = re.compile(r"\\[^0-9A-Za-z\s]")
_CODE_SPAN = re.compile(r"(`+)[\s\S]*?[^`]\1(?!`)")
# A ``<`` that may open a tag: before ``@ # / :`` or a word and a colon (``a:``, ``t:``, ``id:`` and
# any tag Discord adds of that shape), but not a link's ``<https://…>``, which only hides its embed.
_TAG_START = re.compile(r"<(?=[@#/:]|[A-Za-z]+:(?!//))")
_SPECIAL = frozenset("`\\<")  # where one of the rules may match


def render_discord(markdown: str, limit: int) -> list[OutboundText]:
    """Messages to send for ``markdown``, each at most ``limit`` characters, tags shown as written.
    ``[]`` for blank text; ``ValueError`` only for a ``limit`` under ``MIN_LIMIT``."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters, got {limit}")
    if not markdown.strip():
        return []
    parts = converted_parts(markdown, limit, escape_tags, smallest=MIN_LIMIT // 2)
    return [OutboundText(part) for part in parts]


def escape_tags(markdown: str) -> str:
    """``markdown`` with a backslash before each ``<`` outside code that could open a Discord tag."""
    out: list[str] = []
    position = 0
    while position < len(markdown):
        if markdown[position] not in _SPECIAL:
            out.append(markdown[position])
            position += 1
            continue
        for rule in (_CODE_BLOCK, _ESCAPE, _CODE_SPAN):
            match = rule.match(markdown, position)
            if match:
                out.append(match.group())
                position = match.end()
                break
        else:
            if _TAG_START.match(markdown, position):
                out.append("\\")
            out.append(markdown[position])
            position += 1
    return "".join(out)
