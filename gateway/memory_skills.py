"""Where memory and skills live, chosen by the storage ``storage.url`` names.

- SQLite (the embedded default): files in ``HERALD_HOME`` (``memories/``, ``skills/``), which people
  also edit by hand, exactly as before there was a database.
- PostgreSQL: the database's ``memory_documents`` and ``skill_files`` tables, so every gateway process
  on every machine reads and writes the same memory and skills.

The runtime picks the backend from its storage; the command line (``herald memory``, ``herald skills``)
opens only what the backend needs (the database on PostgreSQL, nothing on SQLite) and no provider, so
it works without API keys.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent.memory import MemoryBank
from agent.memory.database import DatabaseMemoryDocuments
from agent.memory.files import FileMemoryDocuments
from agent.skills import SkillLibrary
from agent.skills.database import DatabaseSkillTree
from agent.skills.files import DiskSkillTree
from agent.storage.base import Storage
from gateway.config import HeraldConfig
from gateway.home import HeraldHome
from gateway.storage import open_home_storage, storage_url


@dataclass(frozen=True)
class MemoryAndSkills:
    memory: MemoryBank
    skills: SkillLibrary


def memory_and_skills(config: HeraldConfig, home: HeraldHome, storage: Storage | None) -> MemoryAndSkills:
    """The database's tables when ``storage`` is PostgreSQL; otherwise the files in ``home``."""
    limits = (config.memory.memory_char_limit, config.memory.user_char_limit)
    if storage is not None and storage.dialect == "postgresql":
        return MemoryAndSkills(
            MemoryBank(DatabaseMemoryDocuments(storage), *limits), SkillLibrary(DatabaseSkillTree(storage))
        )
    return MemoryAndSkills(
        MemoryBank(FileMemoryDocuments(home.memories_dir), *limits),
        SkillLibrary(DiskSkillTree(home.skills_dir)),
    )


@asynccontextmanager
async def open_memory_and_skills(
    config: HeraldConfig, home: HeraldHome, *, read_only: bool = False
) -> AsyncIterator[MemoryAndSkills]:
    """Memory and skills as the configuration places them, for the command line: on SQLite the files
    (the database is not opened), on PostgreSQL the database (connected and migrated, closed on exit).
    ``read_only``: the command only reads (see ``open_home_storage``)."""
    if storage_url(config, home).dialect == "sqlite":
        yield memory_and_skills(config, home, None)
        return
    async with open_home_storage(home, config, pool_size=2, read_only=read_only) as storage:
        yield memory_and_skills(config, home, storage)
