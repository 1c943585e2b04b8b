"""``herald storage migrate``: a bot's whole state.db into PostgreSQL, verified, and idempotent."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.base import ChatAddress, OutboundText
from agent.db.connect import open_storage
from agent.db.schema import messages, sessions
from agent.db.transfer import prompt_hash
from agent.db.urls import parse_storage_url
from gateway.home import HeraldHome
from gateway.ledger.outbox import Operation, Outbox, Outgoing
from gateway.tables import cron_jobs, outbox
from tests.emulator import ProviderEmulator
from tests.fakes import FakeTelegram
from tests.fakes.waiting import PROCESS_TIMEOUT
from tests.gateway.test_gateway_crash import configure, gateway_process

FIXTURE = Path(__file__).parent.parent / "fixtures" / "state-release-a013be2.db"
pytestmark = pytest.mark.own_database  # state.db and a PostgreSQL of its own: both ends of a move


def _hash(url: str | None, home: HeraldHome) -> str:
    async def read() -> str:
        async with open_storage(parse_storage_url(url, home.db_path)) as storage:
            return await storage.read(prompt_hash)

    return asyncio.run(read())


def test_a_release_state_db_is_copied_verified_and_a_second_run_changes_nothing(
    home: HeraldHome, herald, postgresql_database: str
) -> None:
    shutil.copy(FIXTURE, home.db_path)
    first = herald("storage", "migrate", "--to", postgresql_database)
    assert first.returncode == 0, first.stderr
    assert "  messages: 43 rows, 43 copied" in first.stdout
    assert "Verified: every table has the same rows" in first.stdout
    assert _hash(postgresql_database, home) == _hash(None, home)  # the sessions' exact prompt bytes
    second = herald("storage", "migrate", "--to", postgresql_database)
    assert second.returncode == 0, second.stderr
    assert "  messages: 43 rows, 0 copied" in second.stdout and "0 copied now" in second.stdout


def test_text_holding_nul_written_by_an_older_release_is_copied_valid_and_verified(
    home: HeraldHome, herald, postgresql_database: str
) -> None:
    """Releases before NUL characters were dropped stored them in SQLite; PostgreSQL's text refuses them."""
    shutil.copy(FIXTURE, home.db_path)
    with contextlib.closing(sqlite3.connect(home.db_path)) as db, db:
        db.execute("UPDATE messages SET content = ? WHERE id = 1", ("Hello\x00 there",))
    first = herald("storage", "migrate", "--to", postgresql_database)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "  messages: 43 rows, 43 copied, 1 text value made valid (NUL characters dropped)" in first.stdout
    assert "  outbox: " in first.stdout and "  requests: " in first.stdout
    assert "Verified: every table has the same rows" in first.stdout
    assert "  messages (43): the stored contents" in first.stdout  # the cleaned source hashed as copied
    assert "1 text value in state.db held NUL characters, which PostgreSQL cannot store" in first.stdout
    assert _content(postgresql_database, home, 1) == "Hello there"  # as valid_text makes new text
    second = herald("storage", "migrate", "--to", postgresql_database)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "  messages: 43 rows, 0 copied, 1 text value made valid" in second.stdout


def test_a_copied_message_whose_contents_differ_is_reported(
    home: HeraldHome, herald, postgresql_database: str
) -> None:
    """Counts alone would pass: the row is there, but it is not what the session sent."""
    shutil.copy(FIXTURE, home.db_path)
    first = herald("storage", "migrate", "--to", postgresql_database)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Verified: what the sessions send again is identical" in first.stdout
    assert "  sessions (3): the prompt bytes" in first.stdout

    async def tamper() -> None:
        async with open_storage(parse_storage_url(postgresql_database, home.db_path)) as storage:
            change = sa.update(messages).where(messages.c.id == 5).values(payload=messages.c.payload + " ")
            await storage.write(lambda conn: conn.execute(change))

    asyncio.run(tamper())
    second = herald("storage", "migrate", "--to", postgresql_database)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "  messages: 43 rows, 0 copied" in second.stdout  # a row it has is not overwritten ...
    assert "  different: messages: 43 rows on both sides, but other values in payload\n" in second.stdout
    assert "  different: sessions" not in second.stdout and "Not verified" in second.stdout


def _content(url: str, home: HeraldHome, message_id: int) -> str:
    async def read() -> str:
        async with open_storage(parse_storage_url(url, home.db_path)) as storage:
            query = sa.select(messages.c.content).where(messages.c.id == message_id)
            return await storage.read(lambda conn: conn.execute(query).scalar_one())

    return asyncio.run(read())


def test_memory_and_skills_files_go_into_the_database_once(
    home: HeraldHome, herald, postgresql_database: str
) -> None:
    shutil.copy(FIXTURE, home.db_path)
    (home.memories_dir / "USER.md").write_text("Ada likes trains.\n§\nShe lives in Zürich.\n")
    people = home.memories_dir / "users" / "telegram-2"
    people.mkdir(parents=True)
    (people / "MEMORY.md").write_text("Asked for a trip plan.\n")
    skill = home.skills_dir / "travel" / "trains"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: trains\ndescription: Plan train trips\n---\nUse SBB.\n")
    (skill / "stations.csv").write_bytes(b"code,name\nZH,Zurich HB\n")
    first = herald("storage", "migrate", "--to", postgresql_database)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "  memory: 2 documents, 2 copied" in first.stdout
    assert "  skills: 1 skills, 1 copied" in first.stdout
    second = herald("storage", "migrate", "--to", postgresql_database)
    assert "  memory: 2 documents, 0 copied" in second.stdout
    assert "  skills: 1 skills, 0 copied" in second.stdout

    home.config_path.write_text(f"storage:\n  url: {postgresql_database}\n")  # now read from the database
    shown = herald("memory", "show", "user:telegram:2")
    assert shown.returncode == 0 and "Asked for a trip plan." in shown.stdout
    listed = herald("skills", "show", "trains", "stations.csv")
    assert listed.returncode == 0 and "ZH,Zurich HB" in listed.stdout


def test_a_database_holding_another_bots_rows_is_not_verified(
    home: HeraldHome, herald, postgresql_database: str
) -> None:
    shutil.copy(FIXTURE, home.db_path)
    assert herald("storage", "migrate", "--to", postgresql_database).returncode == 0
    for suffix in ("", "-wal", "-shm"):
        Path(f"{home.db_path}{suffix}").unlink(missing_ok=True)
    _hash(None, home)  # a new, empty state.db: another bot
    result = herald("storage", "migrate", "--to", postgresql_database)
    assert result.returncode == 1
    assert "different: sessions: 0 here, 3 there" in result.stdout


def test_the_url_must_be_postgresql_and_the_password_is_never_printed(home: HeraldHome, herald) -> None:
    shutil.copy(FIXTURE, home.db_path)
    result = herald("storage", "migrate", "--to", "mysql://u:secret@x/y")
    assert result.returncode == 2 and "PostgreSQL" in result.stderr and "secret" not in result.stderr
    result = herald("storage", "migrate", "--to", "postgresql://u:secret@127.0.0.1:1/y")
    assert result.returncode == 2 and "cannot be reached" in result.stderr
    assert "secret" not in result.stderr + result.stdout


def _rows(url: str, home: HeraldHome, query: sa.Select[Any]) -> list[tuple[Any, ...]]:
    async def read() -> list[tuple[Any, ...]]:
        async with open_storage(parse_storage_url(url, home.db_path)) as storage:
            return await storage.read(lambda conn: [tuple(row) for row in conn.execute(query)])

    return asyncio.run(read())


@pytest.mark.slow
def test_migrate_refuses_while_a_gateway_runs_on_state_db_and_runs_once_it_is_gone(
    emulator: ProviderEmulator, home: HeraldHome, herald, postgresql_database: str
) -> None:
    """The issue's story: a reply copied as pending was then sent by the SQLite gateway and sent again
    from PostgreSQL. Nothing is copied while a gateway holds state.db, and a killed one holds nothing."""
    shutil.copy(FIXTURE, home.db_path)
    fake = FakeTelegram()
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        with gateway_process(home, fake) as gateway:
            fake.wait_for_sync(lambda: fake.calls_to("getUpdates"), PROCESS_TIMEOUT, what="it polling")
            refused = herald("storage", "migrate", "--to", postgresql_database)
            assert refused.returncode == 2 and refused.stdout == "", refused
            assert refused.stderr == (
                f"herald: {home.db_path} is in use by another Herald process (pid {gateway.pid}): stop the "
                "gateway (and any `herald chat`) first, then run `herald storage migrate` again; what it "
                "wrote after a copy would be left behind, and a reply it sent would be sent again.\n"
            )
            copied = sa.select(sa.func.count()).select_from(sessions)
            assert _rows(postgresql_database, home, copied) == [(0,)]
            gateway.send_signal(signal.SIGKILL)  # a crash: the kernel drops its lock with it
            gateway.wait(timeout=10)
    done = herald("storage", "migrate", "--to", postgresql_database)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verified: every table has the same rows with the same values in every column" in done.stdout


def test_no_herald_process_writes_state_db_while_it_is_being_copied(home: HeraldHome, herald) -> None:
    add = ("cron", "add", "--target", "telegram:2", "--schedule", "every 2h", "Water the plants")

    async def hold_and_try() -> None:
        async with open_storage(parse_storage_url(None, home.db_path), exclusive=True):  # the migration
            result = await asyncio.to_thread(herald, *add)
            assert result.returncode == 2, result
            assert f"herald: {home.db_path} is being copied by `herald storage migrate`" in result.stderr
            listed = await asyncio.to_thread(herald, "cron", "list")  # reading harms no copy
            assert (listed.returncode, listed.stdout) == (0, "No scheduled jobs.\n"), listed

    asyncio.run(hold_and_try())
    assert herald(*add).returncode == 0  # the copy is over


def test_every_tables_states_are_copied_and_a_state_changed_after_the_copy_is_caught(
    home: HeraldHome, herald, postgresql_database: str
) -> None:
    """Row counts alone said "Verified" when the SQLite gateway had sent a reply copied as pending."""
    shutil.copy(FIXTURE, home.db_path)
    address = ChatAddress("telegram", "2")

    async def queue_replies() -> list[int]:
        async with open_storage(parse_storage_url(None, home.db_path)) as storage:
            replies = Outbox(storage)
            sent, pending = await replies.enqueue(
                [Outgoing(address, Operation.SEND, OutboundText(text)) for text in ("sent", "pending")]
            )
            await replies.mark_sent(sent, "501")
            return [sent, pending]

    sent, pending = asyncio.run(queue_replies())
    added = herald("cron", "add", "--target", "telegram:2", "--schedule", "every 2h", "Water the plants")
    assert added.returncode == 0, added.stderr
    plants = sa.select(cron_jobs.c.id, cron_jobs.c.enabled).where(cron_jobs.c.prompt == "Water the plants")
    first = herald("storage", "migrate", "--to", postgresql_database)
    assert first.returncode == 0, first.stdout + first.stderr
    states = sa.select(outbox.c.id, outbox.c.state, outbox.c.platform_message_id).order_by(outbox.c.id)
    assert _rows(postgresql_database, home, states)[-2:] == [
        (sent, "sent", "501"),
        (pending, "pending", None),
    ]
    [(job, enabled)] = _rows(postgresql_database, home, plants)
    assert enabled is True

    async def gateway_ran_again() -> None:  # what a gateway on state.db did after the copy
        async with open_storage(parse_storage_url(None, home.db_path)) as storage:
            await Outbox(storage).mark_sent(pending, "502")

    asyncio.run(gateway_ran_again())
    assert herald("cron", "pause", job).returncode == 0
    second = herald("storage", "migrate", "--to", postgresql_database)
    assert second.returncode == 1, second.stdout + second.stderr
    different = dict(
        line.removeprefix("  different: ").split(": ", 1)
        for line in second.stdout.splitlines()
        if line.startswith("  different: ")
    )
    assert set(different) == {"outbox", "cron_jobs"}, second.stdout
    replies = len(_rows(postgresql_database, home, states))
    assert different["outbox"] == (
        f"{replies} rows on both sides, but other values in state, attempts, platform_message_id, sent_at"
    )
    assert different["cron_jobs"] == "2 rows on both sides, but other values in enabled, version, updated_at"
    assert "Not verified" in second.stdout and "Verified:" not in second.stdout
