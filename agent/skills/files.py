"""Skills as folders under ``HERALD_HOME/skills``, which people may also edit by hand (the default).

Reading follows the rules of the disk: hidden folders are not searched for skills, and a symlink is
read only when it leads to a file inside its skill's folder (one that leads out is neither listed nor
read).

Atomicity: writes hold an exclusive lock on the library (``skills/.lock``, across processes). A file is
replaced in one step; a folder is replaced by building the new one beside it (a hidden
``.herald-new-*`` folder) and swapping the two with renames, so readers see the old folder or the new
one (a crash between the two renames leaves the old one in a hidden ``.herald-old-*`` folder). A write
that raised changed nothing (the lock is released, the half-built folder removed) and may be retried.
The disk work runs in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent.files.atomic import atomic_write_bytes, directory_lock, fsync_directory
from agent.files.private import make_private_dirs
from agent.skills.library import FileRead, OutsideSkill, SkillChanged, SkillTree
from agent.skills.rules import SKILL_FILE, UNLISTED_FOLDERS, SkillDocument


def _is_inside(path: Path, directory: Path) -> bool:
    return path == directory or path.is_relative_to(directory)


class DiskSkillTree(SkillTree):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.description = f"files in {root}"

    def where(self, path: str) -> str:
        return str(self.root / path)

    async def skill_documents(self) -> list[SkillDocument]:
        return await asyncio.to_thread(self._skill_documents)

    def _skill_documents(self) -> list[SkillDocument]:
        found: list[SkillDocument] = []
        if not self.root.is_dir():
            return found
        for root, dirs, files in os.walk(self.root, followlinks=False):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            if SKILL_FILE not in files:
                continue
            directory = Path(root).relative_to(self.root).as_posix()
            try:
                found.append(SkillDocument(directory, (Path(root) / SKILL_FILE).read_bytes()))
            except OSError as exc:
                found.append(SkillDocument(directory, None, str(exc)))
        return found

    async def files_under(self, directory: str) -> list[str]:
        return await asyncio.to_thread(self._files_under, self.root / directory)

    @staticmethod
    def _files_under(folder: Path) -> list[str]:
        base = folder.resolve()
        found: list[str] = []
        for root, dirs, files in os.walk(folder, followlinks=False):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in UNLISTED_FOLDERS]
            for file_name in files:
                path = Path(root) / file_name
                if path.is_symlink() and not _is_inside(path.resolve(), base):
                    continue
                found.append(path.relative_to(folder).as_posix())
        return found

    async def read_file(self, directory: str, relative: str, limit: int) -> FileRead | None:
        def read() -> FileRead | None:
            folder = self.root / directory
            target = (folder / relative).resolve()
            if not _is_inside(target, folder.resolve()):
                raise OutsideSkill(relative)
            if not target.is_file():
                return None
            size = target.stat().st_size
            return FileRead(size, target.read_bytes() if size <= limit else None)

        return await asyncio.to_thread(read)

    async def replace_folder(self, directory: str, files: Mapping[str, bytes], remove: Sequence[str]) -> None:
        await asyncio.to_thread(self._replace_folder, directory, files, remove)

    def _replace_folder(self, directory: str, files: Mapping[str, bytes], remove: Sequence[str]) -> None:
        make_private_dirs(self.root)
        new = Path(tempfile.mkdtemp(prefix=".herald-new-", dir=self.root))
        try:
            for relative, data in files.items():
                path = new / relative
                make_private_dirs(path.parent)
                path.write_bytes(data)
                path.chmod(0o600)
            with directory_lock(self.root):
                for folder in remove:
                    shutil.rmtree(self.root / folder, ignore_errors=True)
                target = self.root / directory
                make_private_dirs(target.parent)
                old = None
                if target.exists():
                    old = Path(tempfile.mkdtemp(prefix=".herald-old-", dir=self.root))
                    os.replace(target, old / "skill")
                os.replace(new, target)
                fsync_directory(target.parent)
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(new, ignore_errors=True)  # gone already unless something failed

    async def write_file(self, directory: str, relative: str, data: bytes, expected: bytes | None) -> None:
        def write() -> None:
            path = self.root / directory / relative
            with directory_lock(self.root):
                try:
                    current: bytes | None = path.read_bytes()
                except FileNotFoundError:
                    current = None
                if current != expected:
                    raise SkillChanged(relative)
                atomic_write_bytes(path, data)

        await asyncio.to_thread(write)
