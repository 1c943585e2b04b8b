"""The ``execute_code`` tool: a Python program run where the terminal's commands run (``tools.sandbox``).

The code is written to a fresh folder inside the workspace and run there by the ``python3`` of the place it
runs in (the sandbox's, the container's), with the terminal's timeout and capped output; the folder is
removed afterwards (what the code should keep, it writes to the workspace: the folder's parent).

Code is opaque: the approval rules read shell commands, not programs. So the security default is: in a
sandbox (bubblewrap, docker) code runs without asking, the sandbox being the boundary (no writes outside
the workspace, no network unless ``tools.sandbox_network``, limits); without one (``tools.sandbox: none``)
every run is held for the owner's approval first. Either way it is in the audit, code and outcome.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.hands.terminal import TOOLSET, Terminal, report
from agent.tools.approval import Finding
from agent.tools.registry import Tool, ToolContext, ToolError

LANGUAGES = {"python": ("main.py", "python3 main.py")}
CODE_FOLDER = ".herald-code-"  # each run's fresh folder in the workspace: .herald-code-XXXXXXXX
UNSANDBOXED = Finding(
    "unsandboxed_code",
    "runs a program Herald cannot read, on this machine itself (tools.sandbox is none)",
)


@dataclass
class CodeTool:
    terminal: Terminal  # where and how it runs: the runner, environment, timeouts, audit, approvals
    sandboxed: bool  # tools.sandbox is not none: code runs without asking

    def tools(self) -> list[Tool]:
        return [self._tool()]

    async def run(self, args: dict[str, Any], context: ToolContext) -> str:
        language = args.get("language", "python")
        if language not in LANGUAGES:
            raise ToolError(f"'language' must be one of: {', '.join(LANGUAGES)}.")
        code = args.get("code")
        if not isinstance(code, str) or not code.strip():
            raise ToolError("'code' must be the program to run, as text.")
        timeout, capped = self.terminal.timeout_for(args.get("timeout"))
        entry = self.terminal.entry(context, "execute_code", code)
        await self.terminal.approve(entry, () if self.sandboxed else (UNSANDBOXED,), context)
        file_name, command = LANGUAGES[language]
        folder = await asyncio.to_thread(_fresh_folder, self.terminal.workspace, file_name, code)
        try:
            result = await self.terminal.execute(entry, command, cwd=folder, timeout=timeout, context=context)
        finally:
            await asyncio.shield(asyncio.to_thread(shutil.rmtree, folder, True))
        return report(result, timeout, capped)

    def _tool(self) -> Tool:
        settings = self.terminal.settings
        where = "in a sandbox" if self.sandboxed else "on the owner's machine, after the owner approves it"
        return Tool(
            name="execute_code",
            description=(
                f"Run a Python 3 program {where}, in a fresh folder inside the workspace (removed "
                "afterwards: write files to keep to '..', the workspace). Returns the exit code and what it "
                "printed (long output keeps its start and end). No input can be typed."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "language": {"type": "string", "enum": sorted(LANGUAGES)},
                    "code": {"type": "string", "description": "The whole program."},
                    "timeout": {
                        "type": "number",
                        "description": f"Seconds before it is stopped (default {settings.timeout:g}, at "
                        f"most {settings.max_timeout:g}).",
                    },
                },
                "required": ["language", "code"],
            },
            handler=self.run,
            guidance="execute_code: to compute, parse or check data, run a program that prints the answer.",
            toolset=TOOLSET,
        )


def _fresh_folder(workspace: Path, file_name: str, code: str) -> Path:
    """A new folder in the workspace (private, like ``mkdtemp``'s), holding the program."""
    folder = Path(tempfile.mkdtemp(prefix=CODE_FOLDER, dir=workspace))
    (folder / file_name).write_text(code, encoding="utf-8")
    return folder
