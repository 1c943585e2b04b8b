"""Which files the file tools may touch: the workspace and ``tools.allowed_paths``, and nothing else.

A path is judged by where it really leads: relative paths start at the workspace, ``~`` is the home of
Herald's user, and every symbolic link on the way is followed before the judgement (``realpath``), so
``../.env`` and a link in the workspace pointing at ``/etc`` are both refused, while a link from one
place of the workspace to another works.

Between that judgement and the open, the path could change (another process swaps a folder for a
link): :meth:`Confinement.open_regular` and :meth:`Confinement.folder` therefore walk the resolved path
one folder at a time from ``/``, opening each with ``O_NOFOLLOW``, so a link that appeared meanwhile
fails the open instead of being followed (the ``openat`` discipline). Only regular files are opened: a
FIFO's open would block for good. Blocking calls: run them in a thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.tools.registry import ToolError

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FOLDER_MODE = 0o755  # before the umask, like mkdir


class PathChanged(ToolError):
    """A folder on the way became a symbolic link (or vanished) between the check and the open."""


class NotRegular(ToolError):
    """The path is a FIFO, a socket or a device: the file tools never open one (opening a FIFO blocks
    until a writer comes, for good; opening a device can act on it)."""


def real(path: Path) -> Path:
    """``path`` with ``~`` expanded and every symbolic link that exists resolved."""
    return Path(os.path.realpath(path.expanduser()))


def inside(path: Path, root: Path) -> bool:
    """Whether the real path ``path`` is ``root`` or below it (both real)."""
    return path == root or root in path.parents


@dataclass(frozen=True)
class Confinement:
    """The folders the file tools may use (real paths; the workspace first)."""

    workspace: Path
    roots: tuple[Path, ...]

    @classmethod
    def of(cls, workspace: Path, allowed: Iterable[Path] = ()) -> Confinement:
        home = real(workspace)
        return cls(home, (home, *(real(path) for path in allowed)))

    def contains(self, path: Path) -> bool:
        return any(inside(path, root) for root in self.roots)

    def resolve(self, raw: str, *, base: Path | None = None) -> Path:
        """The real path ``raw`` names (relative to ``base``, else the workspace); a ToolError when it
        leads outside the allowed folders, saying whether a symbolic link took it there."""
        if not raw.strip():
            raise ToolError("The path is empty; give a file or folder name (relative to the workspace).")
        if "\x00" in raw:
            raise ToolError("A path cannot contain a NUL character.")
        given = Path(raw).expanduser()
        joined = given if given.is_absolute() else (base or self.workspace) / given
        resolved = real(joined)
        if self.contains(resolved):
            return resolved
        if self.contains(Path(os.path.normpath(joined))):
            raise ToolError(
                f"'{raw}' leads outside the workspace and tools.allowed_paths through a symbolic link; "
                "the file tools do not follow links out."
            )
        raise ToolError(
            f"'{raw}' is outside the workspace and tools.allowed_paths, the only folders the file tools "
            "may use (relative paths start in the workspace)."
        )

    def relative(self, path: Path) -> str:
        """``path`` as the model should name it: relative to the workspace when inside it."""
        if inside(path, self.workspace):
            return str(path.relative_to(self.workspace)) if path != self.workspace else "."
        return str(path)

    def open_regular(self, path: Path) -> int:
        """Open the real path ``path`` for reading if it is a regular file, judged before the open (a
        FIFO or device is never opened) and again on the descriptor (in case it was swapped meanwhile);
        ``IsADirectoryError`` for a folder, :class:`NotRegular` for anything else. ``O_NONBLOCK`` makes
        even a swap to a FIFO between the two checks unable to block."""
        shown = self.relative(path)
        with self.folder(path.parent) as folder:
            before = os.stat(path.name, dir_fd=folder, follow_symlinks=False)
            _refuse_unless_regular(before.st_mode, shown)
            try:
                fd = os.open(
                    path.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder
                )
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise PathChanged(f"'{shown}' became a symbolic link; not followed.") from None
                raise
        try:
            after = os.fstat(fd)
            _refuse_unless_regular(after.st_mode, shown)
            if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
                raise PathChanged(f"'{shown}' was replaced while it was opened; try again.")
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def folder(self, path: Path, *, make: bool = False) -> Iterator[int]:
        """A descriptor of the real folder ``path``, opened one step at a time without following links;
        ``make`` creates the folders that are missing (only inside the allowed roots)."""
        if not self.contains(path):
            raise ToolError(f"'{path}' is outside the workspace and tools.allowed_paths.")
        fd = os.open("/", DIRECTORY_FLAGS)
        try:
            walked = Path("/")
            for part in path.parts[1:]:
                walked = walked / part
                try:
                    step = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not make or not self.contains(walked):
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, NEW_FOLDER_MODE, dir_fd=fd)
                    step = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise PathChanged(
                            f"'{self.relative(walked)}' is not a folder any more (a symbolic link or a file "
                            "appeared); not followed."
                        ) from None
                    raise
                os.close(fd)
                fd = step
            yield fd
        finally:
            os.close(fd)


def _refuse_unless_regular(mode: int, shown: str) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder", shown)
    if stat.S_ISLNK(mode):
        raise PathChanged(f"'{shown}' became a symbolic link; not followed.")
    if not stat.S_ISREG(mode):
        raise NotRegular(
            f"'{shown}' is not a regular file (a pipe, a socket or a device); the file tools read and "
            "write regular files only."
        )
