"""Herald's keys out of its commands' reach: its environment and memory, and hard links to its files.

The process test runs real processes: one holding a key in its environment, made non-dumpable by
``gateway.inspection`` (and one that is not, to show the difference), and a reader of the same user
(``nobody`` when the tests run as root, whom root's privileges would otherwise let read anything).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.hands.files import FileLimits, read_file
from agent.hands.paths import Confinement
from agent.tools.registry import ToolError

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
HOLDER = (
    "import sys\n"
    "from gateway.inspection import forbid_inspection\n"
    "if sys.argv[1] == 'guarded':\n"
    "    assert forbid_inspection()\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def reader_id() -> int | None:
    """The user both processes run as: ``nobody`` when the tests run as root; else the tests' own."""
    return NOBODY if os.geteuid() == 0 else None


def python() -> str:
    """A Python the holder's user may run (as root, ``nobody`` may not enter root's own Pythons)."""
    if os.geteuid() != 0:
        return sys.executable
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no system Python for the unprivileged holder")
    return "/usr/bin/python3"


@contextlib.contextmanager
def holder(mode: str) -> Iterator[subprocess.Popen[str]]:
    env = {"PATH": os.defpath, "PYTHONPATH": str(ROOT), "HERALD_CANARY_KEY": "sk-canary-1234"}
    process = subprocess.Popen(
        [python(), "-c", HOLDER, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/",
        user=reader_id(),
        group=reader_id(),
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    try:
        yield process
    finally:
        process.communicate("", timeout=30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc are Linux's")
@pytest.mark.parametrize("mode", ["guarded", "plain"])
def test_a_command_of_the_same_user_cannot_read_the_environment_of_a_guarded_process(mode: str) -> None:
    with holder(mode) as process:
        reader = subprocess.run(
            ["cat", f"/proc/{process.pid}/environ"],
            capture_output=True,
            timeout=30,
            cwd="/",
            user=reader_id(),
            group=reader_id(),
        )
    leaked = b"sk-canary-1234" in reader.stdout
    if mode == "guarded":
        assert not leaked and b"Permission denied" in reader.stderr
    else:
        assert leaked  # what a command could read before


def test_read_file_refuses_a_hard_link_to_herald_s_keys(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    (home / ".env").write_text("ANTHROPIC_API_KEY=sk-canary\n")
    os.link(home / ".env", workspace / "notes.txt")  # made by an approved command (ln ../.env notes.txt)
    (workspace / "plain.txt").write_text("hello\n")
    confinement = Confinement.of(workspace)
    with pytest.raises(ToolError) as refused:
        read_file(confinement, "notes.txt", FileLimits(10_000))
    assert "hard link" in str(refused.value) and "sk-canary" not in str(refused.value)
    assert "hello" in read_file(confinement, "plain.txt", FileLimits(10_000))
