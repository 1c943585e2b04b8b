"""Bring the database to this Herald's schema at start-up: Alembic, once, whoever starts first.

Every process runs :func:`migrate` when it opens the storage. It runs in one write transaction (on
SQLite ``BEGIN IMMEDIATE``; on PostgreSQL a transaction holding an advisory lock), so several processes
starting at once migrate once and the others find the work done; a crash half-way leaves the database
as it was. A ``state.db`` written by a release from before Alembic is adopted first
(``agent.db.legacy``). A database migrated by a newer Herald is refused with
:class:`~agent.db.errors.SchemaTooNew` rather than used.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import sqlalchemy as sa

from agent.db import legacy
from agent.db.base import Storage
from agent.db.errors import SchemaTooNew
from agent.db.migrations import HEAD

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATION_LOCK = 7_307_121_842  # pg_advisory_xact_lock key: one migrator at a time


def alembic_config(conn: sa.Connection | None = None) -> Config:
    from alembic.config import Config  # Alembic is loaded only when there is migrating to do

    config = Config()
    config.set_main_option("script_location", "agent.db:migrations")
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def head_revision() -> str:
    """The newest revision this Herald knows (``migrations.HEAD``; a test checks it is Alembic's)."""
    return HEAD


def current_revision(conn: sa.Connection) -> str | None:
    """The revision the database is at (None: no Herald tables yet)."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(conn: sa.Connection, where: str = "the database") -> str | None:
    """Inside a write transaction: adopt a legacy file, refuse a newer schema, upgrade to head.
    Returns the revision found before (None for a new database). ``where`` names the database in the
    refusal."""
    from alembic import command

    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    elif legacy.is_legacy(conn):
        revision = legacy.adopt(conn)
        command.stamp(alembic_config(conn), revision)
        log.info("state.db from a release before Alembic adopted at schema revision %s", revision)
    found = current_revision(conn)
    if found is not None and not known_revision(found):
        raise SchemaTooNew(
            f"{where} is at schema revision {found}, which this Herald does not know: it was migrated by "
            "a newer Herald. Upgrade Herald (or use another database)."
        )
    command.upgrade(alembic_config(conn), "head")
    if found != head_revision():
        log.info("database schema migrated from %s to %s", found or "empty", head_revision())
    return found


def known_revision(revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


async def migrate(storage: Storage) -> str | None:
    """Run :func:`upgrade` in one write transaction of ``storage`` (nothing, and Alembic not even
    loaded, when the database is at this Herald's revision already: every start but the first)."""
    found = await storage.read(current_revision)
    if found == HEAD:
        return found
    # Alembic is loaded before the write transaction, not inside it (a second or more): on SQLite the
    # transaction holds the file's write lock, which every process starting at once waits for (at most
    # the busy timeout).
    import alembic.command  # noqa: F401

    return await storage.write(partial(upgrade, where=f"the database {storage.description}"))
