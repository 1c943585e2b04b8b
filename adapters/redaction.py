"""Keeping a bot token out of logs and error texts (shared by the platform adapters).

Herald's own lines describe errors through :func:`describe`. Libraries are the risk: an SDK may log
request URLs or payloads that contain the token. While an adapter runs, a :class:`TokenFilter` on
the SDK's loggers rewrites such records; keeping those loggers at WARNING remains the first line of
defence (a filter cannot see exception tracebacks, and only the loggers it is attached to).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

PLACEHOLDER = "<token>"


def redact(text: str, token: str) -> str:
    return text.replace(token, PLACEHOLDER) if token else text


def describe(exc: BaseException, token: str) -> str:
    """``Type: message`` for logs and error texts, never containing the token."""
    return redact(f"{type(exc).__name__}: {exc}", token)


class TokenFilter(logging.Filter):
    """Replaces the token in any record of the ``loggers`` it is attached to.

    A filter on a logger sees only records created by that very logger, not its children's, so
    ``loggers`` names each module logger that may print the token.
    """

    def __init__(self, token: str, loggers: Sequence[str]) -> None:
        super().__init__()
        self._token = token
        self._loggers = tuple(loggers)

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
        for name in self._loggers:
            logging.getLogger(name).addFilter(self)

    def detach(self) -> None:
        for name in self._loggers:
            logging.getLogger(name).removeFilter(self)
