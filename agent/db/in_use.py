"""Who is using a SQLite file now: a lock beside it that every process writing it holds while it runs.

``herald storage migrate`` copies ``state.db`` into PostgreSQL; whatever a gateway (or a terminal
chat) writes into ``state.db`` during or after the copy is left behind, and a reply sent from the old
file after it was copied as pending is sent again from the new one. So every process that opens the
file to write holds a *shared* ``flock`` on ``state.db.lock`` for as long as it has it open, and the
migration takes it *exclusive* (without waiting): it starts only when no one else uses the file, and
no one starts using it until the copy is over.

The lock is :mod:`agent.files.flock` (released by the kernel with its holder, so never stale). It
holds across processes of one machine, which is where one SQLite file is shared. Read-only openers
take no lock: reading during a copy harms nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.db.errors import DatabaseUnwritable, StorageError
from agent.files.flock import LockHeld, take_lock


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
        return take_lock(path, exclusive=exclusive)
    except LockHeld as held:
        others = [pid for pid in held.holders if pid != os.getpid()]
        raise DatabaseInUse(in_use_message(database, others, exclusive=exclusive)) from None
    except OSError as error:
        raise DatabaseUnwritable(database, f"cannot open {path}: {error.strerror or error}") from None


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
