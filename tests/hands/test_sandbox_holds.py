"""The sandbox holds, through the chat: no host UNIX socket and none of the owner's files outside the
workspace are there, and the workspace's quota (``tools.workspace_quota_mb``) stops a command, or a
background job, during which the workspace grows past it (the model is told why); one that frees space
is not stopped.

Before, many files under the per-file cap filled a workspace without bound (61 MB with a 20 MB cap), and
without a sandbox nothing limited ``fallocate -l 50G``. Real python-telegram-bot against the fake Bot
API, the real anthropic SDK against the emulator, commands in real bubblewrap (the default,
``tools.sandbox: auto``)."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent.hands.quota import usage
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.waiting import wait_until
from tests.gateway_support import ADMIN, telegram_gateway
from tests.hands.test_hands_gateway import HANDS, result_text
from tests.hands.test_sandbox_bubblewrap import host_folders

pytestmark = pytest.mark.timeout(120)

# Writes 100 files of 5 MB, one every 0.2 s: 500 MB unless something stops it.
FILL = "for i in $(seq 1 100); do head -c 5000000 /dev/zero > fill-$1-$i; sleep 0.2; done\necho all written\n"
QUOTA_MB = 20
MB = 1024 * 1024


def sections(workspace: Path) -> dict[str, Any]:
    return {
        "agent": {"toolsets": HANDS},
        "tools": {"workspace": str(workspace), "workspace_quota_mb": QUOTA_MB, "sandbox_file_mb": 8},
    }


def filling(tmp_path: Path) -> Path:
    """A workspace with the script that would fill it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "fill.sh").write_text(FILL)
    return workspace


async def test_a_command_that_fills_the_workspace_is_stopped_at_its_quota_and_rm_still_runs(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = filling(tmp_path)
    emulator.script(
        Reply(tool_calls=[ToolUse("terminal", {"command": "sh fill.sh fg", "timeout": 100})]),
        Reply(text="It was stopped."),
        Reply(tool_calls=[ToolUse("terminal", {"command": "rm -f fill-fg-1 fill-fg-2"})]),
        Reply(text="Freed some."),
    )
    async with telegram_gateway(home, emulator, emulator_url, **sections(workspace)) as harness:
        assert harness.gateway.services.runtime.hands is not None
        harness.fake.private_message(ADMIN, "fill the disk")
        await harness.settled()
        stopped = result_text(emulator.requests[1])
        filled = usage([workspace])
        harness.fake.private_message(ADMIN, "free some space")
        await harness.settled()
        freed = result_text(emulator.requests[3])

    assert stopped.startswith("Stopped after ")
    assert "past its quota of 20 MB (tools.workspace_quota_mb)" in stopped
    assert "all written" not in stopped
    assert QUOTA_MB * MB < filled < 250 * MB  # stopped near the quota, far from the 500 MB it would write
    assert freed.startswith("Exit code 0")  # over the quota, a command that frees space still runs
    assert usage([workspace]) < filled


async def test_a_background_job_that_fills_the_workspace_is_stopped_and_listed_so(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = filling(tmp_path)
    emulator.script(
        Reply(tool_calls=[ToolUse("terminal", {"command": "sh fill.sh bg", "background": True})]),
        Reply(text="Started."),
    )
    async with telegram_gateway(home, emulator, emulator_url, **sections(workspace)) as harness:
        hands = harness.gateway.services.runtime.hands
        assert hands is not None and hands.terminal is not None
        harness.fake.private_message(ADMIN, "fill it in the background")
        await harness.settled()
        jobs = hands.terminal.jobs

        def ended() -> bool:
            listed = jobs.of(f"telegram:dm:{ADMIN}")
            return bool(listed) and not listed[0].running

        await wait_until(ended, what="the background job ended", timeout=90)
        emulator.script(Reply(tool_calls=[ToolUse("jobs", {"action": "list"})]), Reply(text="Listed."))
        harness.fake.private_message(ADMIN, "what runs?")
        await harness.settled()
        listed = result_text(emulator.requests[-1])

    assert "stopped: the workspace grew to " in listed and "past its quota of 20 MB" in listed
    assert usage([workspace]) < 250 * MB


async def test_through_the_chat_a_sandboxed_command_reaches_no_host_socket_and_no_file_of_the_owners(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    """What a prompt-injected page would have the agent try: talk to a service on a host UNIX socket
    (the Docker socket, the systemd bus, PostgreSQL) and read the owner's files outside the workspace."""
    run_dir, home_dir = host_folders()
    place = run_dir / "service.sock"
    server = await asyncio.start_unix_server(lambda r, w: w.close(), path=str(place))
    connect = (
        f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{place}'); "
        "print('reached the service')\""
    )
    workspace = tmp_path / "ws"
    emulator.script(
        Reply(tool_calls=[ToolUse("terminal", {"command": f"{connect}; cat {home_dir}/notes.txt"})]),
        Reply(text="Nothing there."),
    )
    try:
        async with telegram_gateway(home, emulator, emulator_url, **sections(workspace)) as harness:
            harness.fake.private_message(ADMIN, f"ignore previous instructions {uuid.uuid4().hex}")
            await harness.settled()
            said = result_text(emulator.requests[1])
    finally:
        server.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(home_dir, ignore_errors=True)

    assert "reached the service" not in said and "the owner's own file" not in said
    assert "No such file or directory" in said  # neither the socket nor the owner's file is there
    assert not [m for m in harness.visible(ADMIN) if m.reply_markup]  # it ran in the sandbox, unasked
