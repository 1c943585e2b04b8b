"""The storage layer itself, on SQLite and on PostgreSQL: migrations, the seam's contract, failures."""

from __future__ import annotations

import asyncio
import gc
import logging
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from random import Random
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.errors import StorageUnavailable
from agent.db.migrate import current_revision, head_revision, migrate, upgrade
from agent.db.postgres import PostgresStorage
from agent.db.schema import metadata
from agent.db.sqlite import SqliteStorage
from agent.db.urls import BadStorageUrl, StorageUrl, parse_storage_url
from gateway.conversation.chat_settings import ChatSettings, ModelChoice
from gateway.home.facts import GatewayFacts
from gateway.tables import gateway_state
from tests.conftest import postgres_server
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.postgres import free_port

FIXTURE = Path(__file__).parent.parent / "fixtures" / "state-release-a013be2.db"


async def test_a_new_database_is_at_the_head_revision_and_migrating_again_changes_nothing(
    storage: Storage,
) -> None:
    assert await storage.read(current_revision) == head_revision()
    assert await migrate(storage) == head_revision()


def _full_text_search(difference: Any) -> bool:
    """A difference the migrations make on purpose: full-text search is theirs alone (agent.db.search),
    FTS5 tables on SQLite, a generated tsvector column with its GIN index on PostgreSQL."""
    kind = difference[0] if isinstance(difference, tuple) else None
    if kind == "remove_table":
        return str(difference[1].name).startswith("messages_fts")
    if kind == "remove_index":
        return bool(difference[1].name == "messages_search")
    if kind == "remove_column":
        return bool((difference[2], difference[3].name) == ("messages", "search"))
    return False


async def test_the_migrated_schema_is_the_schema_the_queries_are_written_for(storage: Storage) -> None:
    """Every table, column, type, default, index and key the migrations made is what agent.db.schema
    declares (Alembic's autogenerate comparison), on either database."""

    def differences(conn: sa.Connection) -> list[str]:
        options = {"compare_type": True, "compare_server_default": True}
        found = compare_metadata(MigrationContext.configure(conn, opts=options), metadata)
        return [repr(difference) for difference in found if not _full_text_search(difference)]

    assert await storage.read(differences) == []


@pytest.fixture
def empty_database_url(backend: str, tmp_path: Path) -> Iterator[StorageUrl]:
    """A database without any table yet, on the backend under test."""
    if backend == "sqlite":
        yield parse_storage_url(None, tmp_path / "state.db")
        return
    server = postgres_server()
    url = server.new_database(empty=True)
    try:
        yield parse_storage_url(url, tmp_path / "unused")
    finally:
        server.drop(url)


async def _unmigrated(url: StorageUrl) -> Storage:
    """``url`` connected as a starting process connects it, before it migrates."""
    if url.path is not None:
        return await SqliteStorage.open(url.path)
    return await PostgresStorage.open(url, pool_size=1)


async def test_two_processes_migrating_an_empty_database_at_once_migrate_it_once(
    empty_database_url: StorageUrl, caplog: pytest.LogCaptureFixture
) -> None:
    """Both found no tables, so both start the migration (each with an engine of its own, as two processes
    do): the first migrates, the second waits for it (SQLite's write lock, PostgreSQL's advisory lock) and
    finds the work done."""
    first, second = await _unmigrated(empty_database_url), await _unmigrated(empty_database_url)
    try:
        assert await first.read(current_revision) is None and await second.read(current_revision) is None
        caplog.set_level(logging.INFO, logger="agent.db.migrate")
        both = [storage.write(partial(upgrade, where=storage.description)) for storage in (first, second)]
        found = await asyncio.gather(*both)
        assert set(found) == {None, head_revision()}  # one migrated it; the other found it done
        assert await first.read(current_revision) == await second.read(current_revision) == head_revision()
        assert caplog.text.count("database schema migrated from empty") == 1
    finally:
        await first.close()
        await second.close()


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


@pytest.mark.sqlite_itself  # a state.db of the last release
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
    counts = conn.execute("SELECT id, request_count FROM sessions ORDER BY id").fetchall()
    assert [count for _, count in counts] == [1, 21, 1]  # counted from the release's requests


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


async def test_a_state_db_another_process_keeps_locked_is_busy_for_now_not_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its write lock held past the busy timeout (a first start migrating on a loaded machine): the
    caller is told to retry, nothing was written (the gateway runs the turn again later)."""
    import agent.db.sqlite

    monkeypatch.setattr(agent.db.sqlite, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "state.db"
    async with open_storage(parse_storage_url(None, path)) as storage:
        other = sqlite3.connect(path, isolation_level=None)  # another process, in the middle of a write
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageUnavailable) as raised:
                await storage.write(lambda conn: conn.execute(sa.delete(gateway_state)))
        finally:
            other.execute("ROLLBACK")
            other.close()
        await storage.write(lambda conn: conn.execute(sa.delete(gateway_state)))  # free again
    assert str(raised.value) == (
        f"the database {path} is busy: another Herald process kept it locked for more than 0.2 s; try "
        "again in a moment"
    )


async def test_a_postgresql_server_that_is_not_there_is_one_sentence(tmp_path: Path) -> None:
    url = parse_storage_url(f"postgresql://herald:secret@127.0.0.1:{free_port()}/herald", tmp_path / "x.db")
    with pytest.raises(StorageUnavailable) as raised:
        async with open_storage(url, connect_timeout=2):
            pass
    message = str(raised.value)
    assert message.startswith("the database postgresql://herald:***@127.0.0.1:")
    assert "cannot be reached" in message and "secret" not in message


async def test_a_pool_whose_connections_all_stay_busy_is_unavailable_for_now_not_a_bug(
    postgresql_database: str, tmp_path: Path
) -> None:
    """Every connection busy past the wait: the caller is told to retry (the gateway waits and runs the
    turn again) instead of getting an error that would close the message as failed."""
    url = parse_storage_url(postgresql_database, tmp_path / "x.db")
    async with open_storage(url, pool_size=1, connect_timeout=0.5) as busy, open_storage(url) as watcher:
        sleepers = [  # the pool's one connection and its one for bursts
            asyncio.create_task(busy.read(lambda conn: conn.execute(sa.text("SELECT pg_sleep(3600)"))))
            for _ in range(2)
        ]
        activity = sa.text(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep%'"
        )
        await wait_until_awaited(lambda: watcher.read(lambda conn: conn.execute(activity).scalar() == 2))
        try:
            with pytest.raises(StorageUnavailable) as raised:
                await busy.read(lambda conn: conn.execute(sa.text("SELECT 1")))
        finally:
            for sleeper in sleepers:
                sleeper.cancel()
            await asyncio.wait(sleepers)
    assert str(raised.value).endswith(
        "is busy: none of this process's 2 connections came free within 0.5 s; raise storage.pool_size if "
        "this goes on"
    )


async def test_operations_cancelled_half_way_end_whole_and_give_their_connections_back(
    postgresql_database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A /stop or a drain's deadline cancels tasks in the middle of database operations (waiting for a
    connection, connecting, querying, committing): each write still ends whole, all of it or none, and
    no connection is torn down or lost (asyncpg logged "unexpected connection_lost()" as a future's
    exception nobody retrieved for each one cut off; one left to the garbage collector is lost to the
    pool)."""
    caplog.set_level(logging.ERROR)
    random = Random(7)

    def write(key: str) -> Callable[[sa.Connection], None]:
        def run(conn: sa.Connection) -> None:
            conn.execute(sa.insert(gateway_state).values(key=key, value="1"))
            conn.execute(sa.text("SELECT pg_sleep(0.01)"))
            conn.execute(sa.insert(gateway_state).values(key=f"{key}-second", value="1"))

        return run

    url = parse_storage_url(postgresql_database, tmp_path / "x.db")
    async with open_storage(url, pool_size=2) as storage:
        assert isinstance(storage, PostgresStorage)
        keys = [f"k{n}" for n in range(120)]
        outcomes: list[object] = []
        for start in range(0, len(keys), 12):
            tasks = [asyncio.create_task(storage.write(write(key))) for key in keys[start : start + 12]]
            for _ in range(random.randrange(40)):
                await asyncio.sleep(0)
            for task in tasks[::2]:
                task.cancel()
            outcomes += await asyncio.gather(*tasks, return_exceptions=True)
        pool: Any = storage._engine_or_fail().pool
        await wait_until(lambda: pool.checkedout() == 0, what="every connection back in the pool")
        keys_stored = sa.select(gateway_state.c.key)
        stored = set(await storage.read(lambda conn: conn.execute(keys_stored).scalars().all()))
    assert sum(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes) >= 30
    for key, outcome in zip(keys, outcomes, strict=True):
        assert (key in stored) == (f"{key}-second" in stored), key  # whole or not at all
        if outcome is None:
            assert key in stored
    gc.collect()
    assert [record.getMessage() for record in caplog.records] == []


def test_storage_urls_are_checked_and_never_show_a_password(tmp_path: Path) -> None:
    url = parse_storage_url("postgresql://bot:pw@db.internal:5433/herald", tmp_path / "state.db")
    assert url.dialect == "postgresql" and url.redacted == "postgresql://bot:***@db.internal:5433/herald"
    assert url.sqlalchemy.startswith("postgresql+asyncpg://bot:pw@")
    assert parse_storage_url(None, tmp_path / "state.db").path == tmp_path / "state.db"
    with pytest.raises(BadStorageUrl, match=r"SQLite .* or PostgreSQL"):
        parse_storage_url("mysql://x@y/z", tmp_path / "state.db")


def test_the_known_head_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    from agent.db.migrate import alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == head_revision()
