"""Commands in the bubblewrap sandbox (``tools.sandbox: bubblewrap``; bwrap is installed by scripts/test):
real bwrap, real bash and python3 inside, the hands built from settings as Herald builds them."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.hands.bubblewrap import BubblewrapRunner
from agent.hands.limits import GROUP_PREFIX
from agent.hands.processes import alive, all_processes
from agent.hands.runner import RunResult, run_command
from agent.hands.toolbox import Hands
from agent.settings import ToolsSettings
from tests.fakes.waiting import wait_until

pytestmark = pytest.mark.timeout(120)
SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-do-not-leak", "TELEGRAM_BOT_TOKEN": "123:do-not-leak-either"}
# Starts up to 100 sleeping children and prints how many it could start.
FORK_100 = """
import os, time
started = 0
for _ in range(100):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
    started += 1
print(started)
"""
ENVIRON = {"PATH": os.environ["PATH"], "HOME": "/root", "LANG": "C.UTF-8", **SECRETS}


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder of this machine outside the workspace and outside /tmp (which is the sandbox's own)."""
    path = Path(tempfile.mkdtemp(prefix="herald-outside-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path)


def sandboxed(tmp_path: Path, **tools: Any) -> Hands:
    """The hands with ``tools.sandbox: bubblewrap`` in a Herald home under ``tmp_path``."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    settings = ToolsSettings.model_validate({"sandbox": "bubblewrap", **tools})
    hands = Hands.build(settings, herald_home=home, environ=ENVIRON)
    assert hands.terminal is not None, hands.unavailable
    assert hands.terminal.runner.name == "bubblewrap"
    return hands


async def run(hands: Hands, command: str, timeout: float = 60) -> RunResult:  # noqa: ASYNC109
    assert hands.terminal is not None
    terminal = hands.terminal
    return await run_command(
        terminal.runner, command, cwd=terminal.workspace, env=terminal.env, timeout=timeout, limit=20_000
    )


async def test_only_the_workspace_and_allowed_paths_are_writable_and_tmp_is_private(
    tmp_path: Path, outside: Path
) -> None:
    allowed, etc = tmp_path / "allowed", Path("/etc/escaped")
    private = Path(f"/tmp/private-{uuid.uuid4().hex}")
    allowed.mkdir()
    hands = sandboxed(tmp_path, allowed_paths=[str(allowed)])
    result = await run(
        hands,
        f"echo made > in-workspace; echo made > {allowed}/in-allowed; echo tmp > {private}; "
        f"echo escaped > {outside}/escaped; echo code=$?; touch {etc}; cat {private}",
    )

    assert (hands.workspace / "in-workspace").read_text() == "made\n"
    assert (allowed / "in-allowed").read_text() == "made\n"
    assert not (outside / "escaped").exists() and not _exists(etc)
    assert not _exists(private)  # its /tmp was its own
    assert "code=1" in result.stdout.text() and result.stdout.text().endswith("tmp\n")
    stderr = result.stderr.text()
    assert f"{outside}/escaped: No such file or directory" in stderr  # the owner's other files are not there
    assert f"'{etc}': Read-only file system" in stderr  # the system is, read-only


async def test_no_host_unix_socket_is_reachable_and_the_owners_files_are_not_there(tmp_path: Path) -> None:
    """A read-only view of the machine would leave every UNIX socket connectable (Docker's, the user's
    systemd bus, PostgreSQL, ssh-agent): the sandbox sees the system's programs and nothing else."""
    run_dir, home_dir = host_folders()
    secret = home_dir / "notes.txt"
    servers = []
    try:
        for place in (run_dir / "service.sock", home_dir / "agent.sock"):
            servers.append(await asyncio.start_unix_server(lambda r, w: w.close(), path=str(place)))
        probe = "; ".join(
            f"python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{place}\")' "
            f"&& echo reached {place.name} || echo refused {place.name}"
            for place in (run_dir / "service.sock", home_dir / "agent.sock")
        )
        _, writer = await asyncio.open_unix_connection(str(run_dir / "service.sock"))  # the host can
        writer.close()
        result = await run(
            sandboxed(tmp_path), f"{probe}; cat {secret}; cat /etc/hostname >/dev/null && echo etc"
        )
    finally:
        for server in servers:
            server.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(home_dir, ignore_errors=True)

    said = result.stdout.text()
    assert "refused service.sock" in said and "refused agent.sock" in said, said + result.stderr.text()
    assert "reached" not in said
    assert "the owner's own file" not in said
    assert f"{secret}: No such file or directory" in result.stderr.text()
    assert said.endswith("etc\n")  # the system's settings are readable as before


async def test_scratch_folders_are_bounded_and_the_root_is_read_only(tmp_path: Path) -> None:
    result = await run(
        sandboxed(tmp_path, sandbox_scratch_mb=1),
        "head -c 2000000 /dev/zero > /tmp/big; echo tmp=$?; touch /made-here; echo root=$?",
    )

    assert "tmp=1" in result.stdout.text() and "No space left on device" in result.stderr.text()
    assert "root=1" in result.stdout.text() and "Read-only file system" in result.stderr.text()


def host_folders() -> tuple[Path, Path]:
    """A new folder under /run (where services keep their sockets) and one in the owner's home, with a
    file of the owner's in it."""
    run_dir = Path(f"/run/herald-test-{uuid.uuid4().hex}")
    run_dir.mkdir()
    home_dir = Path(tempfile.mkdtemp(prefix="herald-owner-", dir=os.path.expanduser("~")))
    (home_dir / "notes.txt").write_text("the owner's own file\n")
    return run_dir, home_dir


def test_the_survey_lists_what_a_sandboxed_command_can_write_and_a_socket_it_reaches(tmp_path: Path) -> None:
    """``herald doctor`` looks from inside a sandbox: a socket left in the workspace is named."""
    import socket

    from agent.hands.sandbox import reach_report

    hands = sandboxed(tmp_path)
    assert hands.terminal is not None
    clean = reach_report(hands.terminal.runner)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(hands.workspace / "db.sock"))
        found = reach_report(hands.terminal.runner)

    assert clean is not None and found is not None
    assert clean[1] is False and "reaches no UNIX socket" in clean[0] and "/tmp" in clean[0]
    assert found[1] is True and str(hands.workspace / "db.sock") in found[0]


async def test_herald_secrets_are_neither_in_the_environment_nor_readable_in_its_home(tmp_path: Path) -> None:
    hands = sandboxed(tmp_path)
    home = tmp_path / "home"
    (home / ".env").write_text("OPENAI_API_KEY=sk-in-the-env-file\n")
    result = await run(
        hands, f"env; cat {home}/.env; echo home holds: $(ls -A {home}); cat /proc/1/environ | tr '\\0' '\\n'"
    )

    seen = result.stdout.text() + result.stderr.text()
    assert "PATH=" in seen and "LANG=C.UTF-8" in seen  # the environment it should have is there
    for secret in [*SECRETS.values(), "sk-in-the-env-file"]:
        assert secret not in seen
    assert f"{home}/.env: No such file or directory" in seen
    assert "home holds: workspace\n" in result.stdout.text()  # not .env, not the database


async def test_the_network_is_unreachable_unless_sandbox_network_is_on(tmp_path: Path) -> None:
    connections: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(await reader.read(100))
        writer.write(b"pong")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = (
        f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=10); "
        "s.sendall(b'ping'); print(s.recv(10).decode())"
    )
    async with server:
        closed = await run(sandboxed(tmp_path / "closed"), f'python3 -c "{client}"')
        opened = await run(sandboxed(tmp_path / "open", sandbox_network=True), f'python3 -c "{client}"')

    assert closed.exit_code != 0 and "ConnectionRefusedError" in closed.stderr.text()
    assert opened.exit_code == 0 and opened.stdout.text() == "pong\n"
    assert connections == [b"ping"]  # only the sandbox with the network reached the server


async def test_a_fork_bomb_stops_at_the_process_limit_and_is_ended_at_its_timeout(tmp_path: Path) -> None:
    hands = sandboxed(tmp_path, sandbox_processes=40)
    counted = await run(hands, f"python3 -c '{FORK_100}'", timeout=30)
    started = int(counted.stdout.text())
    assert 20 < started < 40  # the rest could not even start

    bomb = asyncio.create_task(run(hands, "bomb() { bomb | bomb & }; bomb; sleep 1000", timeout=3))
    result = await bomb
    assert result.timed_out and "Resource temporarily unavailable" in result.stderr.text()
    leftovers = _descendants()
    assert not [pid for pid in leftovers if _command(pid).startswith(("bwrap", "bash", "sleep"))]


async def test_memory_cpu_and_file_size_are_limited(tmp_path: Path) -> None:
    hands = sandboxed(tmp_path, sandbox_memory_mb=256, sandbox_cpu_seconds=1, sandbox_file_mb=1)

    small = await run(hands, "python3 -c 'x = bytearray(64 * 2**20); print(len(x))'")
    hog = await run(hands, "python3 -c 'x = bytearray(1024 * 2**20)'")
    spin = await run(hands, "python3 -c 'while True: pass'", timeout=60)
    big = await run(hands, "head -c 3000000 /dev/zero > big; echo code=$?")

    assert small.exit_code == 0 and small.stdout.text() == f"{64 * 2**20}\n"
    assert hog.exit_code != 0 and "MemoryError" in hog.stderr.text()
    assert not spin.timed_out and spin.exit_code != 0 and spin.seconds < 30  # SIGXCPU after 1 s of CPU
    assert "File size limit exceeded" in big.stderr.text() and "code=153" in big.stdout.text()  # SIGXFSZ
    assert (hands.workspace / "big").stat().st_size <= 2**20


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _exists(path: Path) -> bool:
    return path.exists()


async def test_a_cancelled_command_is_killed_with_its_sandbox_and_leaves_no_cgroup(tmp_path: Path) -> None:
    hands = sandboxed(tmp_path)
    runner = hands.terminal.runner if hands.terminal else None
    assert isinstance(runner, BubblewrapRunner) and runner.cgroups is not None, "a pids cgroup here"
    task = asyncio.create_task(run(hands, "(trap '' TERM; sleep 1000) & wait"))
    sandbox = await wait_until(
        lambda: [pid for pid in _descendants() if _command(pid).startswith("sleep 1000")],
        what="the sandboxed sleep to start",
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not any(alive(pid) for pid in sandbox), what="the sandbox to die")
    await wait_until(lambda: not _our_cgroups(runner.cgroups), what="its cgroup to be removed")
    assert (await run(hands, "echo next")).stdout.text() == "next\n"
    assert not _our_cgroups(runner.cgroups), "a finished command leaves no cgroup either"


def _our_cgroups(base: Path | None) -> list[Path]:
    return [] if base is None else list(base.glob(f"{GROUP_PREFIX}*"))


def _descendants() -> list[int]:
    """The living processes this test process started, and theirs."""
    children: dict[int, list[int]] = {}
    for info in all_processes():
        if info.state != "Z":
            children.setdefault(info.ppid, []).append(info.pid)
    found, stack = [], [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found
