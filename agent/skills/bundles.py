"""Reading skill folders from disk for ``herald skills import DIR``: what would be copied, and what not.

``DIR`` is one skill (it holds a SKILL.md: it goes to the library folder of the same name) or a folder
of skills (every folder below it that holds a SKILL.md, at the same relative path in the library, so a
category folder stays a category). A skill's files are everything in its folder except hidden files and
folders, ``__pycache__``, and symlinks that lead out of the folder; a skill with a file over
:data:`MAX_IMPORT_FILE_BYTES` or a name that is not text is not imported, and the reason says so.
Blocking disk reads: run in a thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent.files.text import valid_text
from agent.skills.library import Bundle
from agent.skills.rules import SKILL_FILE, UNLISTED_FOLDERS, SkillError, is_hidden

MAX_IMPORT_FILE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class Unreadable:
    """A skill folder that cannot be imported, and why."""

    source: str
    reason: str


def skill_folders(source: Path) -> list[tuple[Path, str]]:
    """The skill folders in ``source`` and the library folder each goes to, in path order."""
    if not source.is_dir():
        raise SkillError(f"{source} is not a folder: pass a skill's folder or a folder of skills.")
    if (source / SKILL_FILE).is_file():
        return [(source, source.resolve().name)]
    found: list[tuple[Path, str]] = []
    for root, dirs, files in os.walk(source, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in UNLISTED_FOLDERS)
        if SKILL_FILE in files:
            found.append((Path(root), Path(root).relative_to(source).as_posix()))
            dirs[:] = []  # a folder inside a skill is part of it
    if not found:
        raise SkillError(f"There is no {SKILL_FILE} in {source} or in the folders below it.")
    return sorted(found, key=lambda item: Path(item[1]).parts)


def read_bundle(folder: Path, directory: str) -> Bundle | Unreadable:
    """The files of the skill in ``folder``, to go to ``directory`` in the library."""
    source = str(folder)
    if valid_text(directory) != directory:
        return Unreadable(source, "its folder name is not valid UTF-8; rename it")
    if not directory or is_hidden(directory):
        return Unreadable(source, "its folder name starts with '.', so it would be hidden; rename it")
    base = folder.resolve()
    files: dict[str, bytes] = {}
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in UNLISTED_FOLDERS]
        for name in names:
            path = Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if name.startswith("."):
                continue
            if valid_text(relative) != relative:
                return Unreadable(
                    source, f"the file name {valid_text(relative)!r} is not valid UTF-8; rename it"
                )
            resolved = path.resolve()
            if not (resolved == base or resolved.is_relative_to(base)) or not resolved.is_file():
                continue  # a symlink out of the skill, or to something that is not a file
            size = resolved.stat().st_size
            if size > MAX_IMPORT_FILE_BYTES:
                return Unreadable(
                    source,
                    f"{relative} is {size / 2**20:.1f} MB, over the "
                    f"{MAX_IMPORT_FILE_BYTES // 2**20} MB limit of a skill file",
                )
            files[relative] = resolved.read_bytes()
    if SKILL_FILE not in files:
        return Unreadable(source, f"its {SKILL_FILE} is a symlink that leads out of the folder")
    return Bundle(directory, files, source)


def read_bundles(source: Path) -> list[Bundle | Unreadable]:
    """Every skill in ``source`` (see the module's docstring); SkillError when there is none."""
    return [read_bundle(folder, directory) for folder, directory in skill_folders(source)]
