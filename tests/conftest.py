"""Shared fixtures: an emulator on loopback, a throwaway HERALD_HOME, a runtime wired to both."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.storage.base import Storage
from agent.storage.connect import open_storage
from agent.storage.urls import parse_storage_url
from gateway.cli import run
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from tests.emulator import ProviderEmulator
from tests.fakes.web import FakeWeb
from tests.helpers import Ran
from tests.web_support import Contexts, tool_contexts


@pytest.fixture(autouse=True)
def _restore_log_levels() -> Iterator[None]:
    """In-process `herald` runs configure Herald's loggers; give the next test the levels it had."""
    names = ("agent", "gateway", "adapters")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
def emulator() -> ProviderEmulator:
    return ProviderEmulator()


@pytest.fixture
async def emulator_url(emulator: ProviderEmulator) -> AsyncIterator[str]:
    async with emulator.serve() as url:
        yield url


@pytest.fixture
def served(emulator: ProviderEmulator) -> Iterator[str]:
    """The emulator in a thread of its own: for in-process CLI runs (which start their own loop)."""
    with emulator.serve_in_thread() as url:
        yield url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeraldHome]:
    """A fresh home, API keys for the SDKs, and an empty working directory (no project context)."""
    herald_home = HeraldHome(tmp_path / "home")
    ensure_home(herald_home)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HERALD_HOME", str(herald_home.root))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for variable in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    yield herald_home


@pytest.fixture
def herald(capsys: pytest.CaptureFixture[str], home: HeraldHome) -> Callable[..., Ran]:
    """``herald ARGS`` in this process (``gateway.cli.run``: the same parsing, home, runtime and exit
    codes as the binary), with its exit code and what it printed."""

    def invoke(*args: str) -> Ran:
        capsys.readouterr()
        code = run(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return invoke


def make_config(base_url: str, provider: str = "anthropic", **sections: dict[str, Any]) -> HeraldConfig:
    """A config pointed at the emulator with fast retries; ``sections`` override config sections.

    Project context files are looked up in the working directory (the test's own, see ``home``), as
    ``herald chat`` does.
    """
    model: dict[str, Any] = {
        "provider": provider,
        "name": "claude-sonnet-4-6" if provider == "anthropic" else "gpt-5",
        "base_url": base_url if provider == "anthropic" else base_url + "/v1",
        "retry_base_delay": 0.01,
        "max_retries": 3,
    }
    model.update(sections.pop("model", {}))
    agent = {"context_dir": str(Path.cwd()), **sections.pop("agent", {})}
    return HeraldConfig.model_validate({"model": model, "agent": agent, **sections})


@pytest.fixture
async def fake_web() -> AsyncIterator[FakeWeb]:
    """The fake web (pages, feeds, search APIs) on 127.0.0.1."""
    fake = FakeWeb()
    async with fake.serve():
        yield fake


@pytest.fixture
async def contexts(tmp_path: Path) -> AsyncIterator[Contexts]:
    """ToolContext for the owner (``contexts(True)``) or a guest (``contexts(False)``)."""
    async with tool_contexts(tmp_path) as context:
        yield context


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Storage]:
    """An empty database at this Herald's schema, for repository tests (``Storage`` seam)."""
    async with open_storage(parse_storage_url(None, tmp_path / "state.db")) as opened:
        yield opened
