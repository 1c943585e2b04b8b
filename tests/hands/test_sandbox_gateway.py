"""A configured sandbox that cannot run here: the terminal tools are not offered to new sessions, a session
offered them before is refused with the reason, nothing runs unsandboxed, and ``herald doctor`` says why.
Real python-telegram-bot against the fake Bot API, the real anthropic SDK against the emulator."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.doctor.run import check_config, run_doctor
from gateway.doctor.sandbox import check_sandbox
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.telegram import FakeTelegram
from tests.gateway_support import ADMIN, telegram_gateway

pytestmark = pytest.mark.timeout(90)

BWRAP_MISSING = (
    "tools.sandbox is bubblewrap, but bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)."
)


def sections(workspace: Path, sandbox: str) -> dict[str, Any]:
    return {
        "agent": {"toolsets": ["memory", "terminal", "files"]},
        "tools": {"workspace": str(workspace), "sandbox": sandbox},
    }


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH on which bwrap is not found (as on a machine without the package)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


async def test_without_bwrap_no_session_gets_the_terminal_and_an_older_session_is_told_why(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path, no_bwrap: None
) -> None:
    workspace = tmp_path / "ws"
    fake = FakeTelegram()
    async with telegram_gateway(
        home, emulator, emulator_url, fake=fake, **sections(workspace, "none")
    ) as harness:
        emulator.script(Reply(text="Hello."))
        harness.fake.private_message(ADMIN, "hi")  # this session is offered the terminal
        await harness.settled()
    assert "terminal" in {tool["name"] for tool in emulator.requests[-1].json["tools"]}

    async with telegram_gateway(
        home, emulator, emulator_url, fake=fake, **sections(workspace, "bubblewrap")
    ) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("terminal", {"command": "touch ran-unsandboxed"})]),
            Reply(text="The sandbox is missing."),
        )
        harness.fake.private_message(ADMIN, "touch a file")
        await harness.settled()
        older = emulator.requests[-1]
        emulator.script(Reply(text="Fresh."))
        harness.fake.private_message(ADMIN, "/new")
        harness.fake.private_message(ADMIN, "what can you do?")
        await harness.settled()
        newer = emulator.requests[-1]

    [refusal] = [b for b in older.json["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert refusal["is_error"] and refusal["content"] == f"Commands cannot run now: {BWRAP_MISSING}"
    assert not (workspace / "ran-unsandboxed").exists()
    offered = {tool["name"] for tool in newer.json["tools"]}
    assert "read_file" in offered and not offered & {"terminal", "jobs", "execute_code"}


async def doctor_says(home: HeraldHome, tools: dict[str, Any]) -> str:
    """What `herald doctor` prints about the sandbox for these ``tools`` settings."""
    config = {"agent": {"toolsets": ["terminal"]}, "tools": tools}
    home.config_path.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    await run_doctor(home, offline=True, out=out, checks=[check_config, check_sandbox], environ={})
    return "".join(line for line in out.getvalue().splitlines(keepends=True) if " sandbox: " in line)


async def test_doctor_says_why_the_sandbox_cannot_run(home: HeraldHome, no_bwrap: None) -> None:
    said = await doctor_says(home, {"sandbox": "bubblewrap"})
    assert said == f"[FAIL] sandbox: {BWRAP_MISSING} Sessions get no terminal tools until it is fixed.\n"


async def test_doctor_says_what_the_working_sandbox_limits(home: HeraldHome) -> None:
    sandboxed = await doctor_says(home, {"sandbox": "bubblewrap", "sandbox_processes": 64})
    unsandboxed = await doctor_says(home, {"sandbox": "none"})
    assert sandboxed.startswith(
        "[ok]   sandbox: bubblewrap makes sandboxes here: commands run without network"
    )
    assert "64 processes" in sandboxed
    assert "unsandboxed" in unsandboxed
    assert "[ok]   sandbox: a sandboxed command can write in " in sandboxed
    assert "reaches no UNIX socket" in sandboxed


async def test_auto_sandboxes_where_bubblewrap_works(home: HeraldHome) -> None:
    said = await doctor_says(home, {})  # tools.sandbox: auto is the default
    assert said.startswith("[ok]   sandbox: bubblewrap makes sandboxes here")


async def test_auto_without_bwrap_runs_commands_unsandboxed_and_says_so(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path, no_bwrap: None
) -> None:
    said = await doctor_says(home, {})
    assert said.startswith("[warn] sandbox: tools.sandbox is auto and no sandbox can be made here (bwrap is")
    assert "a command you approve can read and change whatever that user can" in said

    workspace = tmp_path / "ws"
    emulator.script(
        Reply(tool_calls=[ToolUse("terminal", {"command": "pwd"})]),
        Reply(text="Done."),
    )
    async with telegram_gateway(home, emulator, emulator_url, **sections(workspace, "auto")) as harness:
        harness.fake.private_message(ADMIN, "where are you?")
        await harness.settled()
    blocks = emulator.requests[-1].json["messages"][-1]["content"]
    [result] = [block for block in blocks if block.get("type") == "tool_result"]
    assert not result.get("is_error") and str(workspace) in str(result["content"])
