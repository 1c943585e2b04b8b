"""The owner's hands put together from ``tools.*``: the workspace, the rules, the runner, the tools.

Built once per process when ``agent.toolsets`` names ``terminal`` or ``files``; closed at shutdown, which
stops every background command it started.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.files.private import make_private_dirs
from agent.hands.code import CodeTool
from agent.hands.file_tools import FileTools
from agent.hands.files import FileLimits
from agent.hands.jobs import BackgroundJobs
from agent.hands.paths import Confinement
from agent.hands.quota import WorkspaceQuota
from agent.hands.rules import Judge, Places
from agent.hands.runner import LocalRunner, Runner
from agent.hands.sandbox import SandboxUnavailable, Withheld, runner_for
from agent.hands.terminal import TOOLSET as TERMINAL_TOOLSET
from agent.hands.terminal import Terminal, TerminalSettings
from agent.settings import ToolsSettings
from agent.tools.registry import Tool, ToolSource

log = logging.getLogger(__name__)

TOOLSETS = frozenset({"terminal", "files"})
COMMAND_TOOLS = ("terminal", "jobs", "execute_code")  # the tools that run commands (through the runner)
# What a command gets of Herald's environment besides tools.env: never its keys and tokens.
BASE_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
# No pager, colour or prompt that waits for a person who is not there.
QUIET = {"TERM": "dumb", "NO_COLOR": "1", "PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


class WorkspaceUnusable(Exception):
    """``tools.workspace`` cannot be created or is not a folder; the message says which and why."""


def workspace_path(settings: ToolsSettings, herald_home: Path) -> Path:
    """Where commands run: ``tools.workspace``, else the workspace in Herald's home."""
    return (settings.workspace or herald_home / "workspace").expanduser()


def command_environment(settings: ToolsSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment every command runs with."""
    names = (*BASE_ENVIRONMENT, *settings.env)
    env = {name: environ[name] for name in names if name in environ}
    env.setdefault("PATH", os.defpath)
    return {**env, **QUIET}


@dataclass
class Hands:
    workspace: Path
    confinement: Confinement
    jobs: BackgroundJobs
    terminal: Terminal | None  # None: tools.sandbox is not available here (``unavailable`` says why)
    files: FileTools
    code: CodeTool | None = None  # execute_code, where the terminal's commands run
    unavailable: str | None = None

    @classmethod
    def build(
        cls,
        settings: ToolsSettings,
        *,
        herald_home: Path,
        environ: Mapping[str, str],
        runner: Runner | None = None,
    ) -> Hands:
        """The hands for ``settings``, the workspace created (private) if missing. ``runner``: where
        commands run (default: what ``tools.sandbox`` asks for; when that sandbox is unavailable, the
        hands have no terminal and ``unavailable`` says why)."""
        workspace = workspace_path(settings, herald_home)
        try:
            make_private_dirs(workspace)
        except OSError as error:
            raise WorkspaceUnusable(
                f"tools.workspace {workspace} cannot be created: {error.strerror}"
            ) from None
        if not workspace.is_dir():
            raise WorkspaceUnusable(f"tools.workspace {workspace} is not a folder")
        confinement = Confinement.of(workspace, settings.allowed_paths)
        jobs = BackgroundJobs(limit=settings.max_background, output_limit=settings.output_limit)
        files = FileTools(confinement, FileLimits(settings.max_file_bytes))
        if runner is None:
            try:
                runner = runner_for(
                    settings, workspace=confinement.workspace, herald_home=herald_home, environ=environ
                )
            except SandboxUnavailable as error:
                log.warning("%s The terminal tools are not offered.", error)
                return cls(confinement.workspace, confinement, jobs, None, files, unavailable=str(error))
        judge = Judge(
            settings.approval_rules,
            [(pattern.name, pattern.pattern) for pattern in settings.approval_patterns],
            Places.of(confinement, herald_home),
            safe=settings.safe_commands,
            sandboxed=runner.name != LocalRunner.name,
        )
        terminal = Terminal(
            TerminalSettings(
                timeout=settings.terminal_timeout,
                max_timeout=settings.terminal_max_timeout,
                output_limit=settings.output_limit,
                approval_timeout=settings.approval_timeout,
            ),
            judge,
            runner,
            jobs,
            confinement.workspace,
            command_environment(settings, environ),
            quota=(
                WorkspaceQuota(confinement.roots, settings.workspace_quota_mb, files.pool)
                if settings.workspace_quota_mb is not None
                else None
            ),
        )
        code = CodeTool(terminal, sandboxed=runner.name != LocalRunner.name)
        return cls(confinement.workspace, confinement, jobs, terminal, files, code)

    def tools(self) -> list[Tool]:
        """The tools new sessions get (no command tool while the sandbox is unavailable)."""
        commands = self.terminal.tools() if self.terminal is not None else []
        if self.code is not None:
            commands += self.code.tools()
        return [*commands, *self.files.tools()]

    def withheld(self) -> ToolSource | None:
        """While the sandbox is unavailable: the command tools' refusal, for sessions offered them before."""
        if self.unavailable is None:
            return None
        return Withheld(COMMAND_TOOLS, TERMINAL_TOOLSET, self.unavailable)

    async def stop_chat(self, session_key: str) -> int:
        """Stop the chat's background commands (``/stop``); how many there were."""
        return await self.jobs.stop_chat(session_key)

    def starved(self) -> str | None:
        """Why the file tools can take no call now (``/readyz``), or None."""
        return self.files.pool.starved()

    async def aclose(self) -> None:
        await self.jobs.aclose()
        self.files.pool.close()


def wanted(toolsets: Collection[str]) -> bool:
    """Whether ``agent.toolsets`` asks for any of the hands' tool sets."""
    return bool(TOOLSETS & set(toolsets))
