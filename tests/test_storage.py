"""The storage layer itself, on SQLite and on PostgreSQL: migrations, the seam's contract, failures."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.connect import open_storage
from agent.storage.errors import StorageUnavailable
from agent.storage.migrate import current_revision, head_revision, migrate
from agent.storage.schema import gateway_state
from agent.storage.urls import BadStorageUrl, parse_storage_url
from gateway.chat_settings import ChatSettings, ModelChoice
from gateway.facts import GatewayFacts
from tests.postgres import free_port

FIXTURE = Path(__file__).parent / "fixtures" / "state-release-a013be2.db"


async def test_a_new_database_is_at_the_head_revision_and_migrating_again_changes_nothing(
    storage: Storage,
) -> None:
    assert await storage.read(current_revision) == head_revision()
    assert await migrate(storage) == head_revision()


async def test_a_write_is_all_or_nothing(storage: Storage) -> None:
    def half(conn: sa.Connection) -> None:
        conn.execute(sa.insert(gateway_state).values(key="a", value="1"))
        raise RuntimeError("a bug half-way")

    with pytest.raises(RuntimeError):
        await storage.write(half)
    assert await GatewayFacts(storage).recall("a") is None


async def test_upserts_keep_the_last_value(storage: Storage) -> None:
    settings = ChatSettings(storage)
    await settings.set_model("telegram:dm:1", ModelChoice("anthropic", "claude-sonnet-4-6"))
    await settings.set_model("telegram:dm:1", ModelChoice("openai", "gpt-5"))
    assert await settings.model_for("telegram:dm:1") == ModelChoice("openai", "gpt-5")
    assert await settings.model_for("telegram:dm:2") is None


@pytest.mark.sqlite_only
async def test_a_state_db_of_the_last_release_is_upgraded_in_place_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    shutil.copy(FIXTURE, path)
    columns = _columns(path)
    before = _contents(path, columns)
    async with open_storage(parse_storage_url(None, path)) as storage:
        assert await storage.read(current_revision) == head_revision()
    after = _contents(path, columns)
    assert after == before  # every row of every table the release had, byte for byte
    conn = sqlite3.connect(path)
    assert "schema_versions" not in {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    hits = conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'Zürich'").fetchone()
    assert hits == (1,)  # full-text search still finds what the release stored


RELEASE_TABLES = [
    "sessions", "messages", "requests", "leases", "inbox", "outbox", "pairing_codes",
    "approved_users", "chat_settings", "gateway_state", "cron_jobs",
]  # fmt: skip


def _columns(path: Path) -> dict[str, list[str]]:
    """The columns each of the release's tables has in the file at ``path``."""
    conn = sqlite3.connect(path)
    try:
        return {t: [row[1] for row in conn.execute(f"PRAGMA table_info({t})")] for t in RELEASE_TABLES}
    finally:
        conn.close()


def _contents(path: Path, columns: dict[str, list[str]]) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the release's tables, in ``columns`` (the migrations may add columns since)."""
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY 1").fetchall()
            for table, names in columns.items()
        }
    finally:
        conn.close()


async def test_a_postgresql_server_that_is_not_there_is_one_sentence(tmp_path: Path) -> None:
    url = parse_storage_url(f"postgresql://herald:secret@127.0.0.1:{free_port()}/herald", tmp_path / "x.db")
    with pytest.raises(StorageUnavailable) as raised:
        async with open_storage(url, connect_timeout=2):
            pass
    message = str(raised.value)
    assert message.startswith("the database postgresql://herald:***@127.0.0.1:")
    assert "cannot be reached" in message and "secret" not in message


def test_storage_urls_are_checked_and_never_show_a_password(tmp_path: Path) -> None:
    url = parse_storage_url("postgresql://bot:pw@db.internal:5433/herald", tmp_path / "state.db")
    assert url.dialect == "postgresql" and url.redacted == "postgresql://bot:***@db.internal:5433/herald"
    assert url.sqlalchemy.startswith("postgresql+asyncpg://bot:pw@")
    assert parse_storage_url(None, tmp_path / "state.db").path == tmp_path / "state.db"
    with pytest.raises(BadStorageUrl, match=r"SQLite .* or PostgreSQL"):
        parse_storage_url("mysql://x@y/z", tmp_path / "state.db")


def test_the_known_head_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    from agent.storage.migrate import alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == head_revision()
