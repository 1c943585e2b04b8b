"""A lock that names its holders: a ``flock`` on a file, taken without waiting, and who holds it now.

Herald uses it where two processes of one machine must not do something at once and the one refused
should be told who is in the way (``agent.db.in_use``: a SQLite file being copied;
``gateway.home.gateway_lock``: two gateways on one home). The kernel releases a ``flock`` when its
holder exits, however it exits (``kill -9``, a crash, a reboot), so a lock is never stale and there is
nothing to clean up: the file stays, and means nothing by being there. A descriptor is opened
close-on-exec, so a program the holder starts does not inherit the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from agent.files.private import PRIVATE_FILE


class LockHeld(Exception):
    """Another open file description holds the lock in a way that excludes this one."""

    def __init__(self, path: Path, holders: list[int]) -> None:
        super().__init__(f"{path} is locked by pid {', '.join(map(str, holders)) or 'unknown'}")
        self.path = path
        self.holders = holders  # their process ids (this process's too, when it is one of them)


def take_lock(path: Path, *, exclusive: bool) -> int:
    """Take the ``flock`` on ``path`` (created 0600 if missing), shared or ``exclusive``, without
    waiting; returns the descriptor that holds it (close it to release). Raises :class:`LockHeld` with
    the holders when another claim excludes this one, ``OSError`` when the file cannot be opened."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        holders = lock_holders(fd)
        os.close(fd)
        raise LockHeld(path, holders) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def lock_holders(fd: int) -> list[int]:
    """The processes holding a ``flock`` on the file open at ``fd``, from ``/proc/locks`` (Linux; an
    empty list where it cannot be read)."""
    status = os.fstat(fd)
    file = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    holders: set[int] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            # "1: FLOCK  ADVISORY  READ 4242 fe:00:1234 0 EOF" (a blocked waiter's line has "->" too)
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == file and fields[4].isdigit():
                holders.add(int(fields[4]))
    return sorted(holders)
