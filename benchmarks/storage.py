"""``--storage`` for the benchmarks: where each run keeps its state.

``None`` (the default) is a fresh ``state.db`` in the run's temporary home, as ``herald`` does out of
the box. A PostgreSQL URL names a server: every run gets a database of its own there (created empty and
dropped afterwards), so runs do not see each other's rows; the user must be allowed ``CREATEDB``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from agent.db.urls import parse_storage_url

_names = itertools.count()


@asynccontextmanager
async def run_storage(base: str | None) -> AsyncIterator[dict[str, Any]]:
    """The ``storage`` config section for one run: ``{}`` for SQLite, else a fresh database's URL."""
    if base is None:
        yield {}
        return
    url = parse_storage_url(base, Path(os.devnull))
    admin = create_async_engine(url.sqlalchemy, isolation_level="AUTOCOMMIT")
    name = f"herald_bench_{os.getpid()}_{next(_names)}"
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f"CREATE DATABASE {name}"))
        yield {"url": base.rsplit("/", 1)[0] + f"/{name}"}
    finally:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        await admin.dispose()


def describe(base: str | None) -> str:
    """Where the runs keep their state, for the report (never a password)."""
    if base is None:
        return "SQLite (state.db in each run's home)"
    return f"PostgreSQL ({parse_storage_url(base, Path(os.devnull)).redacted}, a database per run)"
