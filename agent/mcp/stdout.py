"""What a stdio MCP server writes to stdout that is not an MCP message: counted, never logged per line.

A stdio server's stdout is its MCP channel; a server that prints a banner, its logs or a help text
there (a wrong command, a wrapper script that echoes) writes lines that are not MCP messages. The SDK
logs each such line as an error with its traceback (about ten lines of log each: a server that
printed 20,000 lines wrote 200,000 lines into Herald's log, again at every restart) and hands the
error to the client's message handler. Herald drops the SDK's log record (:func:`quiet_sdk_parse_errors`)
and counts the lines per server instead (:class:`StdoutNoise`): a start that fails says how many
there were and what the first said, and a server that runs anyway is reported in one line, at most
once per :data:`REPORT_EVERY`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pydantic import ValidationError

from agent.mcp.stderr import shortened

log = logging.getLogger(__name__)

SDK_LOGGER = "mcp.client.stdio"
SDK_PARSE_ERROR = "Failed to parse JSONRPC message from server"
REPORT_EVERY = 600.0  # seconds between two log lines about one server's stray stdout


@dataclass
class StdoutNoise:
    """The lines one server wrote to stdout that are not MCP messages, over all its starts. With
    ``logged``, lines heard while the server runs are logged, one log line at most every
    :data:`REPORT_EVERY` seconds."""

    server: str
    logged: bool = True
    lines: int = 0
    first: str | None = None
    _told: int = 0  # lines already in a log line or a start's failure
    _logged_at: float | None = None  # the event loop's clock

    def note(self, error: BaseException) -> bool:
        """Count ``error`` when it is the SDK's report of such a line; whether it was."""
        if not isinstance(error, ValidationError):
            return False
        self.lines += 1
        if self.first is None:
            line = next((e["input"] for e in error.errors() if isinstance(e.get("input"), str)), "")
            self.first = shortened(line) or "(a blank line)"
        return True

    def reason(self) -> str | None:
        """The lines not told yet, in a few words (they count as told now); None when there are none."""
        count, self._told = self.lines - self._told, self.lines
        if count <= 0:
            return None
        these = "line to stdout that is not an MCP message" if count == 1 else (
            "lines to stdout that are not MCP messages"
        )
        return f"it wrote {count:,} {these} (the first: {self.first!r})"

    def added_to(self, reason: str) -> str:
        """A failed start's ``reason``, with the lines not told yet when there are some."""
        stray = self.reason()
        return f"{reason}; {stray}" if stray else reason

    def heard_while_running(self, now: float) -> None:
        """Log the lines not told yet, unless the last log line is less than :data:`REPORT_EVERY`
        seconds old (``now``: the event loop's clock)."""
        if not self.logged or self.lines == self._told:
            return
        if self._logged_at is not None and now - self._logged_at < REPORT_EVERY:
            return
        self._logged_at = now
        log.warning(
            "MCP server '%s' runs, but %s; Herald ignores them. A stdio server may write only MCP messages "
            "to stdout (its logs belong on stderr)",
            self.server,
            self.reason(),
        )


class _DropParseErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != SDK_PARSE_ERROR


_FILTER = _DropParseErrors()


def quiet_sdk_parse_errors() -> None:
    """Drop the SDK's per-line error log (see the module docstring); Herald counts the lines instead."""
    logger = logging.getLogger(SDK_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
