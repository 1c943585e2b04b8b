"""Split first, convert after: the parts of an answer for a platform with a markup of its own.

A renderer that converts Markdown into another markup (Slack's mrkdwn, WhatsApp's) splits the Markdown
with ``split_markdown`` (fences kept balanced), converts each part and checks it against the limit: a
part that grew past it anyway (escapes, captions, link addresses added) is split again, smaller, so no
part ever leaves over the limit and no word is lost.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.text.split import split_markdown

SHRINK = 0.9  # a part that grew past the limit is split again at this share of what fitted
HEADROOM = 20  # the first split leaves 1/20 of the limit for what conversion adds


def converted_parts(markdown: str, limit: int, convert: Callable[[str], str], *, smallest: int) -> list[str]:
    """``markdown`` split and converted with ``convert``, every part at most ``limit`` characters;
    ``smallest``: the least a Markdown part is split to before its converted text is cut instead."""
    return _fitted(markdown, limit, limit - limit // HEADROOM, convert, smallest)


def _fitted(
    markdown: str, limit: int, budget: int, convert: Callable[[str], str], smallest: int
) -> list[str]:
    fitted: list[str] = []
    for part in split_markdown(markdown, budget):
        converted = convert(part)
        if len(converted) <= limit:
            fitted.append(converted)
        elif budget > smallest:
            smaller = max(smallest, min(budget - 1, int(budget * limit / len(converted) * SHRINK)))
            fitted.extend(_fitted(part, limit, smaller, convert, smallest))
        else:  # a few characters that convert to more than the limit: cut the converted text
            fitted.extend(converted[at : at + limit] for at in range(0, len(converted), limit))
    return [part for part in fitted if part.strip()]
