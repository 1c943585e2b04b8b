"""Private by default: Herald's home holds chat history, what it knows about people, and API keys.

Directories Herald creates are 0700 and the files that hold conversations, memory or secrets are
0600. The modes are set explicitly after creating (``chmod``), so a permissive umask cannot loosen
them. Existing files are never re-moded behind the user's back: ``herald doctor`` reports loose ones
with the command that fixes them (:func:`loose_permissions`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dirs(path: Path) -> list[Path]:
    """Create ``path`` and its missing parents, each 0700; returns what was created, outermost first."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    created: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # another process was quicker
            continue
        directory.chmod(PRIVATE_DIR)
        created.append(directory)
    return created


def create_private_file(path: Path, text: str = "") -> bool:
    """Create ``path`` as a 0600 file holding ``text``; False (and nothing written) if it exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), PRIVATE_FILE)
        handle.write(text)
    return True


def on_read_only_file_system(path: Path) -> bool:
    """Whether ``path`` (or, when it does not exist, the nearest folder above it that does) is on a file
    system mounted read-only: no mode change makes it writable, so advice to ``chmod`` would be wrong."""
    current = path
    while not current.exists() and current != current.parent:
        current = current.parent
    try:
        return bool(os.statvfs(current).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def loose_permissions(path: Path) -> str | None:
    """What is too open about ``path`` and the command that fixes it; None when it is private."""
    with contextlib.suppress(FileNotFoundError):
        mode = stat.S_IMODE(path.stat().st_mode)
        wanted = PRIVATE_DIR if path.is_dir() else PRIVATE_FILE
        if mode & 0o077:
            return f"{path} is open to other users (mode {mode:04o}); fix: chmod {wanted:o} {path}"
    return None
