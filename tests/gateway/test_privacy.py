"""Private by default: the home holds chat history, memory about people and API keys.

Before, history was world-readable (state.db 0644 under a 0755 home). Now the home is created 0700 and
its files 0600 whatever the umask; a looser existing home gets a warning from `herald doctor`.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.memory import OWNER_SCOPE, user_scope
from gateway.home import HeraldHome, ensure_home
from tests.emulator import ProviderEmulator, Reply
from tests.helpers import open_store, point_at
from tests.state_support import files_bank


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_the_home_is_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    home = HeraldHome(tmp_path / "home")
    ensure_home(home)

    async def database_modes() -> dict[str, str]:
        async with open_store(home.db_path):  # WAL mode: -wal and -shm exist while open
            return {p.name: oct(mode(p)) for p in home.root.glob("state.db*")}

    assert asyncio.run(database_modes()) == {
        "state.db": "0o600",
        "state.db-wal": "0o600",
        "state.db-shm": "0o600",
        "state.db.lock": "0o600",  # empty, but private like the rest
    }
    bank = files_bank(home.memories_dir)
    asyncio.run(bank.store(OWNER_SCOPE).add("memory", "Project uses uv"))
    asyncio.run(bank.store(user_scope("telegram", "42")).add("user", "Name: Ada"))
    directories = [home.root, home.memories_dir, home.skills_dir, *home.memories_dir.glob("**/")]
    files = [home.env_path, home.db_path, *home.memories_dir.rglob("*.md")]
    assert len(files) == 5
    assert {str(p): oct(mode(p)) for p in directories} == {str(p): "0o700" for p in directories}
    assert {str(p): oct(mode(p)) for p in files} == {str(p): "0o600" for p in files}


def test_an_empty_key_in_the_environment_does_not_hide_the_key_in_dotenv(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_at(home, served)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")  # ANTHROPIC_API_KEY= left in a shell profile
    home.env_path.write_text("ANTHROPIC_API_KEY=key-from-dotenv\n")
    emulator.script(Reply(text="Hello."))
    result = herald("chat", "-q", "hi")
    assert result.returncode == 0, result.stderr
    assert os.environ["ANTHROPIC_API_KEY"] == "key-from-dotenv"


def test_doctor_warns_about_a_home_open_to_other_users(home: HeraldHome, herald) -> None:
    home.root.chmod(0o755)
    home.env_path.chmod(0o644)
    result = herald("doctor", "--offline")
    assert result.returncode == 1
    assert (
        f"[warn] permissions: {home.root} is open to other users (mode 0755); fix: chmod 700 {home.root}"
        in (result.stdout)
    )
    assert f"fix: chmod 600 {home.env_path}" in result.stdout
