"""Files replaced in one step, and a lock on a directory that holds across processes.

Used by the file backends of memory (``agent.memory.files``) and skills (``agent.skills.files``), whose
documents people also edit by hand. Both block on disk: call them from a thread, never on the event
loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agent.files.private import make_private_dirs

LOCK_FILE = ".lock"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` in one step: a crash leaves the old file or the new one, never half of either.

    The new file is private (0600, as ``mkstemp`` creates it); missing folders are created 0700.
    """
    make_private_dirs(path.parent)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    fsync_directory(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` as UTF-8, with "\\n" line ends as given."""
    atomic_write_bytes(path, text.encode("utf-8"))


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable where the platform allows it (POSIX); best effort elsewhere."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` shared by every process on this machine (blocks until free).

    The lock is the hidden file ``.lock`` in the directory (created 0600, with the directory if needed).
    """
    make_private_dirs(directory)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
