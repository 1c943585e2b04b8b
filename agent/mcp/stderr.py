"""What a stdio MCP server writes to stderr: logged at debug level, the last lines kept.

A server that exits at start-up usually says why on stderr (a missing module, a bad argument); that
line (``agent.mcp.last_words``) is what ``herald doctor`` and the start-up log show. Servers also chat
on stderr in normal operation (banners, request logs), which is why it is not printed by default
(``herald -v`` shows it).
A pipe, not a file: a long-running server's chatter costs nothing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
from types import TracebackType
from typing import Self, TextIO

from agent.mcp.last_words import last_words

log = logging.getLogger(__name__)

KEEP_LINES = 20
MAX_LINE_CHARS = 300
READ_CHUNK = 4096
DRAIN_TIMEOUT = 0.5  # seconds to read what is left after the connection closed


def shortened(line: str) -> str:
    """A line a server wrote, for a log line: its runs of whitespace one space, at most
    :data:`MAX_LINE_CHARS` characters."""
    text = " ".join(line.split())
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


class StderrTail:
    """The stderr pipe of one stdio server. Enter it before starting the server, exit after closing it."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._lines: collections.deque[tuple[float, str]] = collections.deque(maxlen=KEEP_LINES)
        self._file: TextIO | None = None
        self._pipe: asyncio.ReadTransport | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def file(self) -> TextIO:
        """The write end, for the server's stderr (only while entered)."""
        assert self._file is not None, "enter the StderrTail first"
        return self._file

    def release(self) -> None:
        """Close Herald's copy of the write end (once the server process holds its own, or failed to
        start), so the reader sees the end of the pipe as soon as the server exits."""
        self.file.close()

    async def ended(self, since: float) -> str | None:
        """:meth:`last_line` once the server's stderr ended (its process exited), waiting at most
        ``DRAIN_TIMEOUT`` seconds for the lines it wrote last."""
        await self._drained()
        return self.last_line(since)

    def last_line(self, since: float) -> str | None:
        """The line that says why the server stopped (:func:`last_words`: launchers' notices skipped)
        among those it wrote at ``since`` (the event loop's clock) or later, shortened; None when it
        wrote none (older lines say nothing about a crash now)."""
        text = last_words([line for written, line in self._lines if written >= since])
        return None if text is None else shortened(text)

    async def __aenter__(self) -> Self:
        read_fd, write_fd = os.pipe()
        self._file = os.fdopen(write_fd, "w")
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        read_end = os.fdopen(read_fd, "rb", buffering=0)
        try:
            protocol = asyncio.StreamReaderProtocol(reader)
            self._pipe, _ = await loop.connect_read_pipe(lambda: protocol, read_end)
        except BaseException:
            read_end.close()
            self._file.close()
            raise
        self._task = asyncio.create_task(self._pump(reader), name=f"mcp {self.server} stderr")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()
        await self._drained()
        if self._task is not None:
            self._task.cancel()  # a child of the server may still hold the pipe open
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._pipe is not None:
            self._pipe.close()

    async def _drained(self) -> None:
        """Wait (at most ``DRAIN_TIMEOUT`` seconds) until the reader reached the end of the pipe."""
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_TIMEOUT):
                    await asyncio.shield(self._task)

    async def _pump(self, reader: asyncio.StreamReader) -> None:
        pending = ""
        while chunk := await reader.read(READ_CHUNK):
            *complete, pending = (pending + chunk.decode("utf-8", "replace")).split("\n")
            for line in complete:
                self._keep(line)
            pending = pending[-MAX_LINE_CHARS * 4 :]
        if pending:
            self._keep(pending)

    def _keep(self, line: str) -> None:
        self._lines.append((asyncio.get_running_loop().time(), line))
        log.debug("MCP server %s: %s", self.server, line)
