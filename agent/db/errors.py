"""What can go wrong with the database, each in words that say what to do."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from agent.files.private import PRIVATE_FILE, on_read_only_file_system
from resilience.unreachable import Unreachable

log = logging.getLogger(__name__)


class StorageError(Exception):
    """The database cannot be used; the message says what is wrong and what to do."""


class StorageUnavailable(StorageError, Unreachable):
    """The database server cannot be reached now (down, restarting, network), or every connection of
    the pool stayed busy past the wait. Nothing was written by the operation that raised it; the caller
    may retry later. Herald's one meaning of "away" (``resilience.unreachable``), also for the
    cluster's Redis (``gateway.cluster.redis``)."""


class SchemaTooNew(StorageError):
    """The database was migrated by a newer Herald."""


class DatabaseDamaged(StorageError):
    """The SQLite file is not a database or is corrupt; ``backup`` is the copy saved when it was found."""

    def __init__(self, path: Path, detail: str, backup: Path | None) -> None:
        saved = f"a copy was saved as {backup}" if backup else "no copy could be saved, so copy it first"
        super().__init__(
            f"the database {path} is damaged ({detail}); {saved}, and to start fresh run "
            f"`rm {path} {path}-wal {path}-shm` (sessions start over; config, memory and skills are kept)."
        )
        self.path = path
        self.backup = backup


READ_ONLY_HOME = (
    "commands that only read (herald insights, memory show, skills list, cron list, pairing list, doctor) "
    "work there, the others need it writable: remount it read-write, or point HERALD_HOME at a writable copy"
)


class DatabaseUnwritable(StorageError):
    """SQLite cannot open or write the file: read-only, in a folder that is not writable, disk full, or
    on a file system mounted read-only (where ``chmod`` cannot help, so it is not suggested)."""

    def __init__(self, path: Path, detail: str) -> None:
        if on_read_only_file_system(path):
            advice = f"it is on a read-only file system: {READ_ONLY_HOME}."
        else:
            advice = (
                f"make the file and its folder writable (chmod u+w {path} {path.parent}) and check there is "
                "disk space, or point HERALD_HOME at another directory."
            )
        super().__init__(f"cannot use the database {path} ({detail}); {advice}")
        self.path = path


def save_damaged_copy(path: Path) -> Path | None:
    """Copy a damaged ``path`` (and its WAL, which may hold the latest writes) next to it, privately.

    Returns the copy, or None when none could be made (the file is gone, the disk is full).
    """
    backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        shutil.copyfile(path, backup)
        backup.chmod(PRIVATE_FILE)
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            shutil.copyfile(wal, backup.with_name(backup.name + "-wal"))
    except OSError as error:
        log.error("could not save a copy of the damaged database %s: %s", path, error)
        return None
    return backup
