"""Keeping the bot token out of logs: it is part of every Bot API URL, and it is a credential.

Herald's own lines describe errors through :func:`describe`. Libraries are the risk: ``httpx``
logs every request URL at INFO, PTB's bot logs its API URL at DEBUG. While an adapter runs,
:class:`TokenFilter` on those loggers rewrites such records; keeping ``httpx``, ``httpcore`` and
``telegram`` at WARNING remains the first line of defence (a filter cannot see exception
tracebacks, and other loggers are not covered).
"""

from __future__ import annotations

from adapters.redaction import PLACEHOLDER, describe, redact
from adapters.redaction import TokenFilter as _TokenFilter

URL_LOGGERS = (
    "httpx",
    "telegram.Bot",
    "telegram.ext.ExtBot",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
)

__all__ = ["PLACEHOLDER", "URL_LOGGERS", "TokenFilter", "describe", "redact"]


class TokenFilter(_TokenFilter):
    """The shared filter on the loggers that print Bot API URLs (:data:`URL_LOGGERS`)."""

    def __init__(self, token: str) -> None:
        super().__init__(token, URL_LOGGERS)
