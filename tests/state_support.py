"""Memory and skills on either backend, for tests: files under a folder, or tables of a ``Storage``.

A test module that checks the shared behaviour parametrizes over :data:`KINDS` and asks for the
``storage`` fixture only for the database (``request.getfixturevalue``), so the database kind runs on
every database the run was asked for (``--storage``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from agent.db.base import Storage
from agent.memory import OWNER_SCOPE, MemoryBank, MemoryTarget
from agent.memory.database import DatabaseMemoryDocuments
from agent.memory.files import FileMemoryDocuments
from agent.skills import SkillLibrary
from agent.skills.database import DatabaseSkillTree
from agent.skills.files import DiskSkillTree
from agent.skills.library import Bundle
from gateway.config import load_config
from gateway.home import HeraldHome
from gateway.home.memory_skills import open_memory_and_skills

KINDS = ("files", "database")


def files_bank(root: Path, memory_limit: int = 2200, user_limit: int = 1375) -> MemoryBank:
    return MemoryBank(FileMemoryDocuments(root), memory_limit, user_limit)


def database_bank(storage: Storage, memory_limit: int = 2200, user_limit: int = 1375) -> MemoryBank:
    return MemoryBank(DatabaseMemoryDocuments(storage), memory_limit, user_limit)


def storage_for(kind: str, request: pytest.FixtureRequest) -> Storage | None:
    """The test's ``storage`` fixture for the database kind (call it from a synchronous fixture)."""
    return request.getfixturevalue("storage") if kind == "database" else None


def bank_on(storage: Storage | None, root: Path, *limits: int) -> MemoryBank:
    """The database's memory when there is a storage, else files under ``root``."""
    return files_bank(root, *limits) if storage is None else database_bank(storage, *limits)


def files_library(root: Path) -> SkillLibrary:
    return SkillLibrary(DiskSkillTree(root))


def database_library(storage: Storage) -> SkillLibrary:
    return SkillLibrary(DatabaseSkillTree(storage))


def library_on(storage: Storage | None, root: Path) -> SkillLibrary:
    """The database's skills when there is a storage, else folders under ``root``."""
    return files_library(root) if storage is None else database_library(storage)


def skill_md(name: str, description: str = "", body: str = "Do the thing.\n", **fields: str) -> bytes:
    header = "".join(
        f"\n{key}: {value}" for key, value in {"description": description, **fields}.items() if value
    )
    return f"---\nname: {name}{header}\n---\n{body}".encode()


def bundle(directory: str, files: dict[str, bytes]) -> Bundle:
    return Bundle(directory, files, f"source/{directory}")


def editor(tmp_path: Path, code: str) -> str:
    """An $EDITOR value: a Python script whose ``code`` changes the file ``path`` (a ``pathlib.Path``)."""
    script = tmp_path / f"editor{len(list(tmp_path.glob('editor*.py')))}.py"
    script.write_text(f"import pathlib, sys\npath = pathlib.Path(sys.argv[1])\n{code}\n", encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


async def put_memory(
    home: HeraldHome, text: str, *, scope: str = OWNER_SCOPE, target: MemoryTarget = "user"
) -> None:
    """Write a memory document as a hand edit (or a bug) would, wherever this home keeps memory: the
    files on SQLite, the database on PostgreSQL. No check applies: that is the point of such tests."""
    async with open_memory_and_skills(load_config(home.config_path), home) as kept:
        await kept.memory.documents.update(scope, target, lambda _current: text)


async def read_memory(home: HeraldHome, *, scope: str = OWNER_SCOPE, target: MemoryTarget = "user") -> str:
    async with open_memory_and_skills(load_config(home.config_path), home) as kept:
        return await kept.memory.store(scope).read(target)


async def put_skill(home: HeraldHome, directory: str, files: dict[str, bytes]) -> None:
    """Install a skill folder wherever this home keeps skills."""
    async with open_memory_and_skills(load_config(home.config_path), home) as kept:
        await kept.skills.tree.replace_folder(directory, files, remove=[])
