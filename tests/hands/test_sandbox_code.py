"""``execute_code`` end to end: real python-telegram-bot against the fake Bot API, the real anthropic SDK
against the emulator, the program run by python3 in the bubblewrap sandbox (or, unsandboxed, only after
the owner's button)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.gateway_support import ADMIN, Harness, telegram_gateway
from tests.hands.test_hands_gateway import labels, question, result_text

pytestmark = pytest.mark.timeout(90)

PROGRAM = """
import os, socket
open("../kept.txt", "w").write("from the program")
print(sum(range(10)), os.getcwd() != os.path.abspath(".."))
try:
    open("/etc/herald-code-escaped", "w")
except OSError as error:
    print("outside:", error.strerror)
"""


def code_sections(workspace: Path, sandbox: str, **tools: Any) -> dict[str, Any]:
    return {
        "agent": {"toolsets": ["memory", "terminal", "files"]},
        "tools": {"workspace": str(workspace), "sandbox": sandbox, **tools},
    }


async def audited(harness: Harness) -> list[tuple[str, str, str | None]]:
    entries = await harness.gateway.services.runtime.store.audit.entries()
    return [(entry.tool, entry.outcome.value, entry.runner) for entry in reversed(entries)]


async def test_execute_code_runs_python_in_the_sandbox_without_asking(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    sections = code_sections(workspace, "bubblewrap", output_limit=1000)
    async with telegram_gateway(home, emulator, emulator_url, **sections) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("execute_code", {"language": "python", "code": PROGRAM})]),
            Reply(tool_calls=[ToolUse("execute_code", {"language": "python", "code": "print('x' * 5000)"})]),
            Reply(text="It printed 45."),
        )
        harness.fake.private_message(ADMIN, "add up 0 to 9 with python")
        await harness.settled()
        first, second = result_text(emulator.requests[-2]), result_text(emulator.requests[-1])
        offered = {tool["name"] for tool in emulator.requests[0].json["tools"]}
        audit = await audited(harness)

    assert "execute_code" in offered
    assert first.startswith("Exit code 0") and "stdout:\n45 True\noutside: Read-only file system" in first
    assert (workspace / "kept.txt").read_text() == "from the program"
    assert sorted(path.name for path in workspace.iterdir()) == ["kept.txt"]  # its folder was removed
    assert "bytes cut" in second and len(second) < 1500  # output capped like a command's
    assert not [m for m in harness.visible(ADMIN) if m.reply_markup]  # nothing was asked
    assert audit == [("execute_code", "ran", "bubblewrap"), ("execute_code", "ran", "bubblewrap")]


async def test_unsandboxed_code_waits_for_the_owners_approval(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    code = "open('../ran.txt', 'w').write('yes'); print('done')"
    async with telegram_gateway(home, emulator, emulator_url, **code_sections(workspace, "none")) as harness:
        emulator.script(
            Reply(tool_calls=[ToolUse("execute_code", {"language": "python", "code": code})]),
            Reply(text="Ran it."),
        )
        harness.fake.private_message(ADMIN, "run this")
        asking = await question(harness)
        assert not (workspace / "ran.txt").exists()  # held: nothing ran yet
        assert labels(asking) == ["Approve once", "Allow this command for the session", "Deny"]
        assert "open('../ran.txt'" in asking.text and "tools.sandbox is none" in asking.text
        harness.fake.press_button(ADMIN, asking.message_id, ADMIN, "Approve once")
        await harness.settled()
        shown = result_text(emulator.requests[-1])
        audit = await audited(harness)

    assert shown.startswith("Exit code 0") and shown.endswith("stdout:\ndone")
    assert (workspace / "ran.txt").read_text() == "yes"
    assert [(tool, outcome) for tool, outcome, _ in audit] == [
        ("execute_code", "held"),
        ("execute_code", "approved_once"),
        ("execute_code", "ran"),
    ]
