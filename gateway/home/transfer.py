"""The files of a Herald home that live in the database on PostgreSQL: memory and skills.

On SQLite a home keeps memory (``memories/``) and skills (``skills/``) as files people edit by hand;
on PostgreSQL they are tables (``gateway.home.memory_skills``). ``herald storage migrate`` copies them with
the tables: each memory document as it is on disk, each skill folder file by file. As for the tables, a
copy the destination already has is left alone, so a second run changes nothing, and
:func:`compare` says whether both sides now hold the same.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from agent.db import Storage
from agent.memory import TARGETS, DatabaseMemoryDocuments, FileMemoryDocuments
from agent.skills import Bundle, DatabaseSkillTree, SkillError, SkillTree, Unreadable, read_bundles


@dataclass
class FilesCopy:
    """What was found on disk and what had to be written."""

    memory_documents: int = 0
    memory_copied: int = 0
    skills: int = 0
    skills_copied: int = 0
    skipped: list[str] = field(default_factory=list)  # skill folders that cannot be read, and why


async def copy_memory(memories: Path, destination: Storage, report: FilesCopy) -> None:
    files = FileMemoryDocuments(memories)
    database = DatabaseMemoryDocuments(destination)
    for scope in await files.scopes():
        for target in TARGETS:
            text = await files.read(scope, target)
            if not text:
                continue
            report.memory_documents += 1
            if await database.read(scope, target) != text:
                await database.update(scope, target, partial(_replace, text=text))
                report.memory_copied += 1


def _skill_folders(skills: Path) -> list[Bundle | Unreadable]:
    """The home's skill folders as they would be imported (none when there is no library yet)."""
    if not skills.is_dir() or not any(skills.rglob("SKILL.md")):
        return []
    return read_bundles(skills)


def _replace(_current: str, *, text: str) -> str:
    return text


async def copy_skills(skills: Path, destination: Storage, report: FilesCopy) -> None:
    try:
        found = await asyncio.to_thread(_skill_folders, skills)
    except SkillError as error:
        report.skipped.append(str(error))
        return
    tree = DatabaseSkillTree(destination)
    for item in found:
        if isinstance(item, Unreadable):
            report.skipped.append(f"{item.source}: {item.reason}")
            continue
        report.skills += 1
        if await _holds(tree, item) is False:
            await tree.replace_folder(item.directory, item.files, remove=[])
            report.skills_copied += 1


async def _holds(tree: SkillTree, bundle: Bundle) -> bool:
    """Whether ``tree`` has exactly ``bundle``'s files in its folder."""
    present = sorted(await tree.files_under(bundle.directory))
    if present != sorted(bundle.files):
        return False
    for relative, data in bundle.files.items():
        found = await tree.read_file(bundle.directory, relative, len(data))
        if found is None or found.data != data:
            return False
    return True


async def compare(memories: Path, skills: Path, destination: Storage) -> list[str]:
    """What differs between the home's files and the database (nothing: an empty list)."""
    differences = []
    files = FileMemoryDocuments(memories)
    database = DatabaseMemoryDocuments(destination)
    for scope in await files.scopes():
        for target in TARGETS:
            text = await files.read(scope, target)
            if text and await database.read(scope, target) != text:
                differences.append(f"memory {target} of {scope}")
    tree = DatabaseSkillTree(destination)
    for item in await asyncio.to_thread(_skill_folders, skills):
        if isinstance(item, Bundle) and not await _holds(tree, item):
            differences.append(f"skill folder {item.directory}")
    return differences
