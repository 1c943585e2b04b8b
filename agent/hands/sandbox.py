"""Choosing where commands run from ``tools.sandbox``, and saying plainly when that place is not there.

``auto`` (the default) is bubblewrap where a sandbox can be made here, else this machine, with a
warning that says why and how to get the sandbox. ``none`` runs commands on this machine
(:class:`~agent.hands.runner.LocalRunner`). ``bubblewrap`` and ``docker`` run them in a sandbox; when it
cannot be had (bwrap missing, user namespaces off, no Docker socket), :func:`runner_for` raises
:class:`SandboxUnavailable` with the reason, and the commands' tools are not offered: Herald never falls
back to running unsandboxed what the owner explicitly asked to sandbox.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agent.hands.bubblewrap import BubblewrapMissing, BubblewrapRunner, Layout, reach
from agent.hands.limits import SandboxLimits
from agent.hands.runner import LocalRunner, Runner
from agent.settings import ToolsSettings
from agent.tools.registry import Tool, ToolContext, ToolError

log = logging.getLogger(__name__)


class SandboxUnavailable(Exception):
    """The configured sandbox cannot run commands here; the message says why and what to do."""


def runner_for(
    settings: ToolsSettings, *, workspace: Path, herald_home: Path, environ: Mapping[str, str]
) -> Runner:
    """The runner ``tools.sandbox`` asks for, checked to work here (a sandbox is made once to see)."""
    if settings.sandbox == "none":
        return LocalRunner()
    limits = SandboxLimits.of(settings)
    if settings.sandbox in ("auto", "bubblewrap"):
        layout = Layout.of(workspace, settings.allowed_paths, herald_home)
        try:
            return BubblewrapRunner.find(layout=layout, network=settings.sandbox_network, limits=limits)
        except BubblewrapMissing as error:
            if settings.sandbox == "auto":
                reason = UNSANDBOXED.format(why=error)
                log.warning("%s", reason)
                return LocalRunner(unsandboxed_because=reason)
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
    if isinstance(runner, LocalRunner) and runner.unsandboxed_because is not None:
        return runner.unsandboxed_because, runner.unsandboxed_because
    if runner.name == "local":
        return "none: commands run on this machine as Herald's own user, unsandboxed (tools.sandbox).", None
    return f"{runner}.", None


def reach_report(runner: Runner) -> tuple[str, bool] | None:
    """What a sandboxed command can reach, found by one from inside, and whether a socket is among it
    (None: ``runner`` is no bubblewrap sandbox). Runs a sandbox: call it from a thread."""
    if not isinstance(runner, BubblewrapRunner):
        return None
    try:
        found = reach(runner)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"what a sandboxed command can reach could not be surveyed ({error}).", True
    writable = ", ".join(found.writable) or "nothing"
    if not found.sockets:
        return f"a sandboxed command can write in {writable}, and reaches no UNIX socket.", False
    sockets = ", ".join(found.sockets)
    return (
        f"a sandboxed command can write in {writable}, and can connect to these UNIX sockets: {sockets}. "
        "Each is a service a command could talk to; move it out of the folders the sandbox sees "
        "(tools.workspace, tools.allowed_paths).",
        True,
    )


UNSANDBOXED = (
    "tools.sandbox is auto and no sandbox can be made here ({why}), so commands run on this machine as "
    "Herald's own user: a command you approve can read and change whatever that user can. Install "
    "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) for the sandbox, or set tools.sandbox: none "
    "to say this is what you want."
)


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
