"""A command's output within a limit: its head and its tail, and how much was cut between them.

A command may print gigabytes (``yes``, a log ``cat`` by mistake); the model needs the start (what
ran, the first error) and the end (the result, the last error), never all of it. :class:`CappedOutput`
keeps at most ``limit`` bytes in memory however much is fed to it, and counts the rest.
"""

from __future__ import annotations

import asyncio

from agent.files.text import valid_text

READ_CHUNK = 65_536


class CappedOutput:
    """The first ``limit // 2`` bytes fed and the last ``limit - limit // 2``, and the total."""

    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError("an output limit keeps at least two bytes")
        self.limit = limit
        self._head_size = limit // 2
        self._tail_size = limit - self._head_size
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_size - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            extra = len(self._tail) - self._tail_size
            if extra > 0:
                del self._tail[:extra]

    @property
    def cut(self) -> int:
        """Bytes fed but not kept (between the head and the tail)."""
        return self.total - len(self._head) - len(self._tail)

    def text(self) -> str:
        """What was kept, as text, with one line in place of what was cut."""
        head = _decode(bytes(self._head))
        if not self.cut:
            return _decode(bytes(self._head + self._tail))
        tail = _decode(bytes(self._tail))
        return f"{head}\n[... {self.cut:,} bytes cut; {self.total:,} in all ...]\n{tail}"


def _decode(data: bytes) -> str:
    return valid_text(data.decode("utf-8", "replace"))


async def pump(stream: asyncio.StreamReader, into: CappedOutput) -> None:
    """Read ``stream`` to its end into ``into`` (a pipe of a command)."""
    while chunk := await stream.read(READ_CHUNK):
        into.feed(chunk)
