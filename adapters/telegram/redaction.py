"""Keeping the bot token out of logs: it is part of every Bot API URL, and it is a credential.

Herald's own lines describe errors through :func:`describe`. Libraries are the risk: ``httpx``
logs every request URL at INFO, PTB's bot logs its API URL at DEBUG. While an adapter runs,
:class:`TokenFilter` on those loggers rewrites such records; keeping ``httpx``, ``httpcore`` and
``telegram`` at WARNING remains the first line of defence (a filter cannot see exception
tracebacks, and other loggers are not covered).
"""

from __future__ import annotations

import logging

URL_LOGGERS = (
    "httpx",
    "telegram.Bot",
    "telegram.ext.ExtBot",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
)
PLACEHOLDER = "<token>"


def redact(text: str, token: str) -> str:
    return text.replace(token, PLACEHOLDER) if token else text


def describe(exc: BaseException, token: str) -> str:
    """``Type: message`` for logs and error texts, never containing the token.

    PTB's own messages carry no URLs, but wrapped httpx errors may.
    """
    return redact(f"{type(exc).__name__}: {exc}", token)


class TokenFilter(logging.Filter):
    """Replaces the token in any record of the loggers it is attached to (see :data:`URL_LOGGERS`)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keeps the record; never raises (it runs inside the library's logging call)."""
        if not self._token:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it, not the request path
            return True
        if self._token in message:
            record.msg, record.args = message.replace(self._token, PLACEHOLDER), ()
        return True

    def attach(self) -> None:
        for name in URL_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def detach(self) -> None:
        for name in URL_LOGGERS:
            logging.getLogger(name).removeFilter(self)
