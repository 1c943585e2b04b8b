"""``tools.sandbox: docker`` through the real ``docker`` SDK against a fake Engine API on a unix socket (no
Docker Engine runs here or in CI): what each container is asked to be, its output and exit code, its
removal, a timeout, and an Engine or image that is missing."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.hands.runner import RunResult, run_command
from agent.hands.toolbox import Hands
from agent.settings import ToolsSettings
from tests.fakes.docker_engine import FakeDockerEngine

pytestmark = pytest.mark.timeout(90)
ENVIRON = {"PATH": os.environ["PATH"], "HOME": "/root", "LANG": "C.UTF-8", "ANTHROPIC_API_KEY": "sk-secret"}


@pytest.fixture
async def engine() -> AsyncIterator[tuple[FakeDockerEngine, str]]:
    folder = tempfile.mkdtemp(prefix="dk-", dir="/tmp")  # a socket's path must be short
    fake = FakeDockerEngine()
    try:
        async with fake.serve(Path(folder) / "docker.sock") as url:
            yield fake, url
    finally:
        shutil.rmtree(folder)


async def in_docker(tmp_path: Path, url: str, **tools: Any) -> Hands:
    """The hands with ``tools.sandbox: docker``, built in a thread (the SDK blocks; the fake serves here)."""
    settings = ToolsSettings.model_validate(
        {"sandbox": "docker", "docker_url": url, "workspace": str(tmp_path / "ws"), **tools}
    )
    return await asyncio.to_thread(Hands.build, settings, herald_home=tmp_path / "home", environ=ENVIRON)


async def run(hands: Hands, command: str, timeout: float = 30) -> RunResult:  # noqa: ASYNC109
    terminal = hands.terminal
    assert terminal is not None, hands.unavailable
    assert terminal.runner.name == "docker"
    return await run_command(
        terminal.runner, command, cwd=terminal.workspace, env=terminal.env, timeout=timeout, limit=10_000
    )


async def test_a_command_runs_in_a_container_made_as_the_sandbox_and_removed_after(
    tmp_path: Path, engine: tuple[FakeDockerEngine, str]
) -> None:
    fake, url = engine
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    hands = await in_docker(
        tmp_path, url, allowed_paths=[str(allowed)], sandbox_memory_mb=512, sandbox_processes=64
    )
    result = await run(hands, "echo out; echo err >&2; exit 3")

    assert result.exit_code == 3 and result.stdout.text() == "out\n" and result.stderr.text() == "err\n"
    [container] = fake.containers.values()
    body, host = container.body, container.body["HostConfig"]
    workspace = str(hands.workspace)
    assert body["Image"] == "python:3.12-slim" and body["Cmd"][:2] == ["/bin/sh", "-c"]
    assert body["WorkingDir"] == workspace and body["User"] == f"{os.getuid()}:{os.getgid()}"
    assert sorted(host["Binds"]) == sorted([f"{workspace}:{workspace}:rw", f"{allowed}:{allowed}:rw"])
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert host["Memory"] == 512 * 2**20 and host["PidsLimit"] == 64 and "/tmp" in host["Tmpfs"]
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]} == {"cpu": 300, "fsize": 1024 * 2**20, "core": 0}
    env = dict(item.split("=", 1) for item in body["Env"])
    assert "ANTHROPIC_API_KEY" not in env and "PATH" not in env and env["LANG"] == "C.UTF-8"
    assert container.removed and f"DELETE /containers/{container.id}" in fake.calls


async def test_the_network_is_none_unless_allowed(
    tmp_path: Path, engine: tuple[FakeDockerEngine, str]
) -> None:
    fake, url = engine
    await run(await in_docker(tmp_path / "a", url), "true")
    await run(await in_docker(tmp_path / "b", url, sandbox_network=True), "true")
    assert [c.body["HostConfig"]["NetworkMode"] for c in fake.containers.values()] == ["none", "bridge"]


async def test_a_command_past_its_timeout_is_stopped_and_its_container_removed(
    tmp_path: Path, engine: tuple[FakeDockerEngine, str]
) -> None:
    fake, url = engine
    result = await run(await in_docker(tmp_path, url), "echo started; sleep 1000", timeout=2)

    assert result.timed_out and result.stdout.text() == "started\n"
    [container] = fake.containers.values()
    assert container.stopped and container.removed and container.exited.is_set()


async def test_no_engine_or_no_image_means_no_terminal_and_says_why(
    tmp_path: Path, engine: tuple[FakeDockerEngine, str]
) -> None:
    _, url = engine
    absent = await in_docker(tmp_path / "a", "unix:///nonexistent/docker.sock")
    no_image = await in_docker(tmp_path / "b", url, sandbox_image="herald/missing:1")

    for hands in (absent, no_image):
        names = {tool.name for tool in hands.tools()}
        assert hands.terminal is None and "read_file" in names
        assert not names & {"terminal", "jobs", "execute_code"}
    assert absent.unavailable == (
        "tools.sandbox is docker, but the Docker socket /nonexistent/docker.sock is absent (is the Docker "
        "Engine running?)."
    )
    assert no_image.unavailable == (
        "tools.sandbox is docker, but the image herald/missing:1 is not there: docker pull herald/missing:1."
    )
