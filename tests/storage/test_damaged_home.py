"""A damaged or unwritable home: one sentence naming the file and what to do, exit code 2, never a
traceback; a damaged database is copied before anything else touches it.

Every command runs against every kind of damage. Tests run as root in some environments, where file
modes do not stop anyone: a read-only database is then simulated by opening it read-only, and an
unwritable home is one below a regular file (which stops root too).
"""

from __future__ import annotations

import asyncio
import io
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.access.pairing import Pairing
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from tests.emulator import ProviderEmulator, Reply
from tests.helpers import Ran, herald_process, open_store, point_at
from tests.read_only_support import can_mount_read_only, herald_on_read_only_home
from tests.state_support import skill_md

COMMANDS: list[tuple[str, ...]] = [
    ("setup",),
    ("chat", "-q", "hi"),
    ("chat",),
    ("chat", "-q", "hi", "--continue"),
    ("config", "get", "model.name"),
    ("config", "set", "model.max_retries", "0"),
    ("insights",),
    ("doctor", "--offline"),
    ("--version",),
]


def make_database(home: HeraldHome) -> None:
    async def create() -> None:
        async with open_store(home.db_path):
            pass

    asyncio.run(create())


def garbage(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    home.db_path.write_bytes(os.urandom(5000))


def truncated(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    make_database(home)
    data = home.db_path.read_bytes()
    home.db_path.write_bytes(data[: len(data) // 2])


def read_only(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    make_database(home)
    home.db_path.chmod(0o444)
    connect = sqlite3.connect

    def read_only_connect(database: str | Path, *args: Any, **kwargs: Any) -> Any:
        if Path(database) == home.db_path:  # what chmod does for anyone but root
            return connect(f"file:{database}?mode=ro", *args, uri=True, **kwargs)
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", read_only_connect)


def below_a_file(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = home.root.parent / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("HERALD_HOME", str(blocker / "home"))


def home_is_a_file(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    path = home.root.parent / "home-file"
    path.write_text("")
    monkeypatch.setenv("HERALD_HOME", str(path))


def broken_config(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    home.config_path.write_text("model: [unclosed\n  - {\n")


def unreadable_env(home: HeraldHome, monkeypatch: pytest.MonkeyPatch) -> None:
    home.env_path.unlink()
    home.env_path.mkdir()  # reading it fails for anyone


DAMAGE: dict[str, Callable[[HeraldHome, pytest.MonkeyPatch], None]] = {
    "garbage database": garbage,
    "truncated database": truncated,
    "read-only database": read_only,
    "home below a file": below_a_file,
    "home is a file": home_is_a_file,
    "broken config": broken_config,
    "unreadable .env": unreadable_env,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_command_on_a_damaged_home_ends_in_a_sentence_not_a_traceback(
    damage: str,
    emulator: ProviderEmulator,
    served: str,
    home: HeraldHome,
    herald: Callable[..., Ran],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    point_at(home, served)
    DAMAGE[damage](home, monkeypatch)
    emulator.script(*[Reply(text="Fine.")] * 5)
    for command in COMMANDS:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        result = herald(*command)  # an exception would fail the test right here
        assert "Traceback" not in result.stderr, (command, result.stderr)
        assert result.returncode in (0, 1, 2), (command, result)
        if result.returncode == 2:
            [line] = [line for line in result.stderr.splitlines() if line.startswith("herald: ")]
            assert len(line.replace(str(home.root), "HOME")) < 400, line  # a sentence, not a dump
        assert "unexpected error" not in result.stderr, (command, result.stderr)


@pytest.mark.sqlite_itself  # the SQLite file itself
@pytest.mark.parametrize("damage", ["garbage database", "truncated database"])
def test_a_damaged_database_is_copied_first_and_the_user_told_how_to_start_fresh(
    damage: str, home: HeraldHome, herald: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    DAMAGE[damage](home, monkeypatch)
    damaged = home.db_path.read_bytes()
    result = herald("chat", "-q", "hi")
    [backup] = home.root.glob("state.db.corrupt-*")
    assert result.returncode == 2 and result.stdout == ""
    assert f"herald: the database {home.db_path} is damaged" in result.stderr
    assert f"a copy was saved as {backup}" in result.stderr
    assert f"rm {home.db_path} {home.db_path}-wal {home.db_path}-shm" in result.stderr
    assert backup.read_bytes() == damaged
    assert oct(backup.stat().st_mode & 0o777) == oct(0o600)


@pytest.mark.sqlite_itself  # the SQLite file itself
def test_a_read_only_database_says_what_to_do(
    home: HeraldHome, herald: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    read_only(home, monkeypatch)
    result = herald("chat", "-q", "hi")
    assert result.returncode == 2
    assert f"herald: cannot use the database {home.db_path} (attempt to write a readonly database)" in (
        result.stderr
    )
    assert f"chmod u+w {home.db_path}" in result.stderr


def test_an_unwritable_home_says_what_to_do(
    home: HeraldHome, herald: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    below_a_file(home, monkeypatch)
    result = herald("chat", "-q", "hi")
    assert result.returncode == 2
    assert "not-a-directory/home: Not a directory. Check that HERALD_HOME" in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="file modes do not stop root")
def test_a_home_without_write_permission_says_what_to_do(
    home: HeraldHome, herald: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = home.root.parent / "locked"
    locked.mkdir(mode=0o500)
    monkeypatch.setenv("HERALD_HOME", str(locked / "home"))
    result = herald("chat", "-q", "hi")
    assert result.returncode == 2 and "Permission denied" in result.stderr


@pytest.mark.slow
@pytest.mark.sqlite_itself  # the SQLite file itself
def test_the_binary_exits_2_without_a_traceback_on_a_garbage_database(home: HeraldHome) -> None:
    """A real process: its exit code and stderr are the point."""
    home.db_path.write_bytes(b"this is not a database" * 100)
    result = herald_process(home, "insights")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(
        f"herald: the database {home.db_path} is damaged (file is not a database)"
    )


def test_a_bug_is_one_sentence_and_exit_code_70(
    home: HeraldHome, herald: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("gateway.insights.render", broken)
    result = herald("insights")
    assert result.returncode == 70 and "Traceback" not in result.stderr
    assert "herald: unexpected error (ZeroDivisionError: division by zero). This is a bug" in result.stderr


def test_a_database_error_shows_neither_its_statement_nor_the_values_it_carried(
    home: HeraldHome, herald: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        with sa.create_engine("sqlite://").connect() as conn:
            conn.execute(sa.text("INSERT INTO nowhere VALUES (:words)"), {"words": "my private words"})
        return ""

    monkeypatch.setattr("gateway.insights.render", broken)
    result = herald("insights")
    assert result.returncode == 70
    [line] = result.stderr.strip().splitlines()
    assert "(OperationalError: (sqlite3.OperationalError) no such table: nowhere). This is a bug" in line
    assert "private" not in result.stderr and "INSERT" not in result.stderr


@pytest.mark.slow
@pytest.mark.sqlite_itself  # state.db in the home
@pytest.mark.skipif(not can_mount_read_only(), reason="needs unshare and mount (a read-only bind mount)")
def test_reports_and_listings_work_on_a_read_only_home_and_the_rest_say_why_they_cannot(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald: Callable[..., Ran]
) -> None:
    """A home on a read-only mount (a backup, a container's read-only volume): what only reads works;
    chat rewrote .env, reports tried to migrate or lock the database, doctor said to chmod and that a
    readable database could not be read."""
    point_at(home, served)
    emulator.script(Reply(text="Tea, always."))
    assert herald("chat", "-q", "What do I drink?").returncode == 0
    job = herald("cron", "add", "--target", "telegram:2", "--schedule", "every 2h", "Water the plants")
    assert job.returncode == 0, job.stderr

    async def approve() -> None:
        async with open_home_storage(home) as storage:
            pairing = Pairing(storage)
            request = await pairing.request("telegram", "7", "Ada", "7")
            assert request.code is not None
            await pairing.approve("telegram", request.code.code, "cli")

    asyncio.run(approve())
    (home.memories_dir / "MEMORY.md").write_text("The owner drinks tea.\n")
    (home.skills_dir / "tea").mkdir()
    (home.skills_dir / "tea" / "SKILL.md").write_bytes(skill_md("tea", "Brew tea", body="Steep 4 minutes.\n"))
    before = {path: path.read_bytes() for path in home.root.rglob("*") if path.is_file()}

    (insights, memory, memories, skills, skill, jobs, pairings, doctor, chat) = herald_on_read_only_home(
        home,
        ["insights"],
        ["memory", "show"],
        ["memory", "list"],
        ["skills", "list"],
        ["skills", "show", "tea"],
        ["cron", "list"],
        ["pairing", "list"],
        ["doctor", "--offline"],
        ["chat", "-q", "hi"],
    )
    for ran in (insights, memory, memories, skills, skill, jobs, pairings):
        assert (ran.returncode, ran.stderr) == (0, ""), ran
    assert "What do I drink?" in insights.stdout and "main turns (1 requests)" in insights.stdout
    assert "The owner drinks tea." in memory.stdout and "owner" in memories.stdout
    assert "tea" in skills.stdout and "Steep 4 minutes." in skill.stdout
    assert "Water the plants" in jobs.stdout and "telegram:7  Ada" in pairings.stdout
    assert f"[warn] home: {home.root} is on a read-only file system: commands that only read" in doctor.stdout
    assert f"[warn] database: {home.db_path} passed SQLite's integrity check" in doctor.stdout
    assert "chmod" not in doctor.stdout and "cannot read" not in doctor.stdout
    assert chat.returncode == 2 and chat.stdout == ""
    [line] = chat.stderr.splitlines()
    assert line.startswith(f"herald: cannot use the database {home.db_path} (") and ".env" not in line
    assert "it is on a read-only file system: commands that only read (herald insights" in line
    assert "chmod" not in line
    assert {path: path.read_bytes() for path in home.root.rglob("*") if path.is_file()} == before
