"""Choosing where commands run from ``tools.sandbox``, and saying plainly when that place is not there.

``none`` runs them on this machine (:class:`~agent.hands.runner.LocalRunner`). ``bubblewrap`` and ``docker``
run them in a sandbox; when it cannot be had (bwrap missing, user namespaces off, no Docker socket),
:func:`runner_for` raises :class:`SandboxUnavailable` with the reason, and the commands' tools are not
offered: Herald never falls back to running unsandboxed what the owner asked to sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agent.hands.bubblewrap import BubblewrapMissing, BubblewrapRunner, Layout
from agent.hands.limits import SandboxLimits
from agent.hands.runner import LocalRunner, Runner
from agent.settings import ToolsSettings
from agent.tools.registry import Tool, ToolContext, ToolError


class SandboxUnavailable(Exception):
    """The configured sandbox cannot run commands here; the message says why and what to do."""


def runner_for(
    settings: ToolsSettings, *, workspace: Path, herald_home: Path, environ: Mapping[str, str]
) -> Runner:
    """The runner ``tools.sandbox`` asks for, checked to work here (a sandbox is made once to see)."""
    if settings.sandbox == "none":
        return LocalRunner()
    limits = SandboxLimits.of(settings)
    if settings.sandbox == "bubblewrap":
        layout = Layout.of(workspace, settings.allowed_paths, herald_home)
        try:
            return BubblewrapRunner.find(layout=layout, network=settings.sandbox_network, limits=limits)
        except BubblewrapMissing as error:
            raise SandboxUnavailable(f"tools.sandbox is bubblewrap, but {error}.") from None
    from agent.hands.docker_runner import DockerMissing, DockerRunner  # the docker SDK: docker only

    try:
        return DockerRunner.find(settings, workspace=workspace, environ=environ, limits=limits)
    except DockerMissing as error:
        raise SandboxUnavailable(f"tools.sandbox is docker, but {error}.") from None


def summary(runner: Runner) -> tuple[str, str | None]:
    """What ``herald doctor`` says of a working runner, and a warning when one of its limits is weak."""
    if isinstance(runner, BubblewrapRunner):
        limits = runner.limits
        network = "with the network" if runner.network else "without network"
        text = (
            f"bubblewrap makes sandboxes here: commands run {network}, the system read-only, "
            f"{limits.cpu_seconds} s CPU, {limits.memory_mb} MB memory, {limits.file_mb} MB files, "
            f"{limits.processes} processes"
        )
        if runner.cgroups is not None:
            return f"{text} (cgroup under {runner.cgroups}).", None
        weak = (
            f"{text}; no pids cgroup can be made here, so the process limit is RLIMIT_NPROC, which does not "
            "bind root: run Herald as its own user, or give it a cgroup with the pids controller."
        )
        return weak, weak
    if runner.name == "local":
        return "none: commands run on this machine as Herald's own user, unsandboxed (tools.sandbox).", None
    return f"{runner}.", None


class Withheld:
    """The command tools while the sandbox is unavailable: offered to no new session, and a session that
    was offered them earlier gets ``reason`` as the answer to a call (its tool list stays as stored)."""

    def __init__(self, names: Iterable[str], toolset: str, reason: str) -> None:
        self.names = frozenset(names)
        self.toolset = toolset
        self.reason = reason

    def tools(self) -> Iterable[Tool]:
        return ()

    def find(self, name: str) -> Tool | None:
        if name not in self.names:
            return None
        return Tool(name, "", {"type": "object"}, self._refuse, "", self.toolset)

    async def _refuse(self, args: dict[str, Any], context: ToolContext) -> str:
        raise ToolError(f"Commands cannot run now: {self.reason}")
