"""The renderer of platforms that show Markdown themselves (Matrix, which converts each part to HTML as
it sends it; e-mail): split, not converted. Discord's adds escapes to it (``adapters.discord.render``)."""

from __future__ import annotations

from adapters.base import OutboundText
from adapters.text.boundaries import Measure
from adapters.text.split import split_markdown


def render_markdown(source: str, limit: int, measure: Measure = len) -> list[OutboundText]:
    """Messages to send for ``source`` (sanitized Markdown, see ``Capabilities.render``): the Markdown
    as it is, split with ``split_markdown`` at ``limit`` (code fences closed and reopened around each
    split). ``[]`` when there is nothing to send."""
    return [OutboundText(part) for part in split_markdown(source, limit, measure)]

