"""A short command loads only what it uses (how fast it answers is measured in benchmarks/cli.py, not
here: a timed assertion fails on a loaded machine). Each command runs in a process of its own, as the
console script runs it, and reports the packages it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.fakes.waiting import PROCESS_TIMEOUT
from tests.helpers import point_at

# The console script's entry point; at exit, the top-level packages the process imported go to stderr's
# last line (stdout stays the command's own).
_RUN_AND_LIST = """
import atexit, json, sys
packages = lambda: sorted({name.split(".")[0] for name in sys.modules})
atexit.register(lambda: print(json.dumps(packages()), file=sys.stderr))
from gateway.cli import main
main()
"""
_SDKS = {"anthropic", "openai", "telegram", "discord", "mcp", "PIL", "pypdf", "av", "edge_tts"}


def imported_by(home: HeraldHome, *args: str) -> set[str]:
    """The top-level packages ``herald ARGS`` imported (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, *args],
        env={**os.environ, "HERALD_HOME": str(home.root)},
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        cwd=Path.cwd(),
    )
    assert done.returncode == 0, done.stderr
    packages: list[str] = json.loads(done.stderr.splitlines()[-1])
    return set(packages)


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--version", "--help"])
def test_version_and_help_load_no_sdk_and_no_database_layer(home: HeraldHome, option: str) -> None:
    loaded = imported_by(home, option)
    assert "gateway" in loaded  # the listing works
    assert loaded & (_SDKS | {"sqlalchemy", "alembic", "apscheduler", "pydantic", "aiohttp"}) == set()


@pytest.mark.slow
def test_a_one_shot_chat_loads_its_provider_sdk_and_nothing_it_does_not_use(
    served: str, home: HeraldHome, herald
) -> None:
    point_at(home, served)
    assert herald("chat", "-q", "first").returncode == 0  # creates the database: a migration is due
    loaded = imported_by(home, "chat", "-q", "second")
    assert {"anthropic", "sqlalchemy"} <= loaded
    assert loaded & (_SDKS - {"anthropic"} | {"alembic", "apscheduler", "prompt_toolkit"}) == set()


@pytest.mark.slow
def test_a_one_shot_chat_with_openai_does_not_load_anthropic(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_at(home, served)
    monkeypatch.setenv("OPENAI_BASE_URL", served + "/v1")
    assert herald("chat", "-q", "first").returncode == 0
    loaded = imported_by(home, "chat", "-q", "second", "--provider", "openai", "--model", "gpt-5-mini")
    assert emulator.requests[-1].api == "openai"
    assert "openai" in loaded and "anthropic" not in loaded
