"""Start-up and shutdown: a failed start closes what it opened; a daemon's prompt ignores its cwd."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agent import assembly
from agent.providers.pool import ProviderPool
from gateway.config import ConfigError
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.helpers import PROJECT_NOTES, SPEC


def database_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("herald-db") and t.is_alive()]


async def test_a_missing_api_key_fails_the_start_and_closes_the_database(
    home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    before = len(database_threads())
    with pytest.raises(ConfigError, match="No API key for anthropic"):
        async with open_agent_runtime(make_config("http://127.0.0.1:1"), home):
            pass
    assert len(database_threads()) == before


async def test_a_failure_late_in_start_up_closes_what_was_opened(
    home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []
    original_close = ProviderPool.aclose

    async def recording_close(self: ProviderPool) -> None:
        closed.append("pool")
        await original_close(self)

    def broken_registry() -> None:
        raise RuntimeError("a tool failed to load")

    monkeypatch.setattr(ProviderPool, "aclose", recording_close)
    monkeypatch.setattr(assembly, "builtin_registry", broken_registry)
    before = len(database_threads())
    with pytest.raises(RuntimeError, match="a tool failed to load"):
        async with open_agent_runtime(make_config("http://127.0.0.1:1"), home):
            pass
    assert closed == ["pool"] and len(database_threads()) == before


@pytest.fixture
def project(home: HeraldHome, tmp_path: Path) -> Path:
    """A project directory with notes, and different notes in the working directory."""
    Path("AGENTS.md").write_text("# Whoever started the daemon\n\nThis must not be loaded.\n")
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "AGENTS.md").write_text(PROJECT_NOTES)
    return directory


async def test_the_project_file_comes_from_the_configured_directory_not_the_working_directory(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, project: Path
) -> None:
    daemon = make_config(emulator_url, agent={"context_dir": None})
    async with open_agent_runtime(daemon, home) as runtime:  # no context_dir: what the gateway does
        bare = (await runtime.new_session(SPEC)).record
    configured = make_config(emulator_url, agent={"context_dir": str(project)})
    async with open_agent_runtime(configured, home) as runtime:
        with_project = (await runtime.new_session(SPEC)).record
    assert bare.system_prompt.context == ""
    assert "Convention 0" in with_project.system_prompt.context
    assert "must not be loaded" not in with_project.system_prompt.context
