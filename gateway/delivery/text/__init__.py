"""Pure text functions of delivery: render a model answer for a platform and split it to its limit.

No I/O and no platform SDK: the results are strings (Discord, terminal) or neutral
``adapters.base.OutboundText`` values (Telegram) that adapters convert.
"""

from gateway.delivery.text.markdown import render_markdown
from gateway.delivery.text.split import split_markdown
from gateway.delivery.text.telegram import TELEGRAM_LIMIT, plain_fallback, render_telegram
from gateway.delivery.text.units import utf16_len

__all__ = [
    "TELEGRAM_LIMIT",
    "plain_fallback",
    "render_markdown",
    "render_telegram",
    "split_markdown",
    "utf16_len",
]
