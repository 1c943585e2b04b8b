"""Who is using a SQLite file now: a lock beside it that every process writing it holds while it runs.

``herald storage migrate`` copies ``state.db`` into PostgreSQL; whatever a gateway (or a terminal
chat) writes into ``state.db`` during or after the copy is left behind, and a reply sent from the old
file after it was copied as pending is sent again from the new one. So every process that opens the
file to write holds a *shared* ``flock`` on ``state.db.lock`` for as long as it has it open, and the
migration takes it *exclusive* (without waiting): it starts only when no one else uses the file, and
no one starts using it until the copy is over.

The kernel releases a ``flock`` when its holder exits, however it exits (``kill -9``, a crash, a
reboot), so a lock is never stale and there is nothing to clean up: the file itself stays and means
nothing by being there. It holds across processes of one machine, which is where one SQLite file is
shared. Read-only openers take no lock: reading during a copy harms nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from agent.private import PRIVATE_FILE
from agent.storage.errors import DatabaseUnwritable, StorageError


class DatabaseInUse(StorageError):
    """The file is in use in a way that excludes this opener; the message names the other processes."""


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


def claim(database: Path, *, exclusive: bool) -> int:
    """Take the lock of ``database`` (shared, or ``exclusive`` for a migration) without waiting; returns
    the descriptor that holds it (close it to release). Raises :class:`DatabaseInUse` naming the holders
    when another process's claim excludes this one, :class:`DatabaseUnwritable` when the lock file cannot
    be created beside the database."""
    path = lock_path(database)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE)
    except OSError as error:
        raise DatabaseUnwritable(database, f"cannot open {path}: {error.strerror or error}") from None
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        holders = lock_holders(fd)
        os.close(fd)
        raise DatabaseInUse(in_use_message(database, holders, exclusive=exclusive)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def in_use_message(database: Path, holders: list[int], *, exclusive: bool) -> str:
    """One sentence: who holds ``database`` and what to do, for a migration (``exclusive``) or for a
    process that wants to use the file while a migration runs."""
    which = f" (pid {', '.join(str(pid) for pid in holders)})" if holders else ""
    if exclusive:
        return (
            f"{database} is in use by another Herald process{which}: stop the gateway (and any `herald "
            "chat`) first, then run `herald storage migrate` again; what it wrote after a copy would be "
            "left behind, and a reply it sent would be sent again."
        )
    return (
        f"{database} is being copied by `herald storage migrate`{which}; start Herald again when it has "
        "finished (and storage.url names the new database)."
    )


def lock_holders(fd: int) -> list[int]:
    """The processes holding a ``flock`` on the file open at ``fd``, from ``/proc/locks`` (Linux; an
    empty list where it cannot be read). This process is left out."""
    status = os.fstat(fd)
    file = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    holders: set[int] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            # "1: FLOCK  ADVISORY  READ 4242 fe:00:1234 0 EOF" (a blocked waiter's line has "->" too)
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == file and fields[4].isdigit():
                holders.add(int(fields[4]))
    holders.discard(os.getpid())
    return sorted(holders)
