"""Skills in the ``skill_files`` table: one row per file of the library, keyed by its library path
(``devops/deploy/SKILL.md``), so the library is the same tree of files as on disk. Used with
PostgreSQL, where every gateway process (on any machine) must see the same skills.

Atomicity: each change is one write transaction (``Storage.write``): a folder is replaced (its rows
deleted and the new ones inserted) all at once or not at all; a compare-and-set claims the row with
``FOR UPDATE`` on PostgreSQL (SQLite holds the write lock for the whole transaction), and a file that
must not exist yet is inserted with ``ON CONFLICT DO NOTHING``, so of two creators one wins and the
other is told. A failure rolls back and may be retried.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import skill_files as table
from agent.db.sql import insert_ignoring_duplicates
from agent.skills.library import FileRead, SkillChanged, SkillTree
from agent.skills.rules import SKILL_FILE, SkillDocument


def _under(directory: str) -> sa.ColumnElement[bool]:
    return table.c.path.startswith(f"{directory}/", autoescape=True)


def _row(path: str, data: bytes, now: float) -> dict[str, object]:
    return {"path": path, "data": data, "size": len(data), "updated_at": now}


class DatabaseSkillTree(SkillTree):
    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.description = f"the database {storage.description}"

    def where(self, path: str) -> str:
        return f"{path} (in the database)"

    async def skill_documents(self) -> list[SkillDocument]:
        query = sa.select(table.c.path, table.c.data).where(
            sa.or_(table.c.path == SKILL_FILE, table.c.path.endswith(f"/{SKILL_FILE}", autoescape=True))
        )
        rows = await self.storage.read(lambda conn: conn.execute(query).all())
        return [SkillDocument(PurePosixPath(row.path).parent.as_posix(), bytes(row.data)) for row in rows]

    async def files_under(self, directory: str) -> list[str]:
        query = sa.select(table.c.path).where(_under(directory))
        paths = await self.storage.read(lambda conn: list(conn.execute(query).scalars()))
        return [path[len(directory) + 1 :] for path in paths]

    async def read_file(self, directory: str, relative: str, limit: int) -> FileRead | None:
        path = f"{directory}/{relative}"

        def read(conn: sa.Connection) -> FileRead | None:
            size = conn.execute(sa.select(table.c.size).where(table.c.path == path)).scalar()
            if size is None:
                return None
            if size > limit:
                return FileRead(size, None)
            data = conn.execute(sa.select(table.c.data).where(table.c.path == path)).scalar_one()
            return FileRead(size, bytes(data))

        return await self.storage.read(read)

    async def replace_folder(self, directory: str, files: Mapping[str, bytes], remove: Sequence[str]) -> None:
        def transact(conn: sa.Connection) -> None:
            for folder in [*remove, directory]:
                conn.execute(sa.delete(table).where(_under(folder)))
            now = time.time()
            rows = [_row(f"{directory}/{relative}", data, now) for relative, data in sorted(files.items())]
            if rows:
                conn.execute(sa.insert(table), rows)

        await self.storage.write(transact)

    async def write_file(self, directory: str, relative: str, data: bytes, expected: bytes | None) -> None:
        path = f"{directory}/{relative}"

        def transact(conn: sa.Connection) -> None:
            if expected is None:
                if insert_ignoring_duplicates(conn, table, _row(path, data, time.time())) == 0:
                    raise SkillChanged(relative)
                return
            claim = sa.select(table.c.data).where(table.c.path == path).with_for_update()
            current = conn.execute(claim).scalar()
            if current is None or bytes(current) != expected:
                raise SkillChanged(relative)
            conn.execute(
                sa.update(table)
                .where(table.c.path == path)
                .values(data=data, size=len(data), updated_at=time.time())
            )

        await self.storage.write(transact)
