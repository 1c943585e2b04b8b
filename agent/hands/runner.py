"""Where a shell command runs: the :class:`Runner` seam, and :class:`LocalRunner`, which runs it here.

The terminal tool, background jobs and (with a sandbox) code execution all start commands through a
:class:`Runner`. A runner only *starts* a command (:meth:`Runner.spawn`) and returns a
:class:`Process`: its output pipes, its end, and a way to stop it with everything it started. What
every command gets whatever runs it — a timeout, output capped to head and tail, the whole tree stopped
on a timeout, on ``/stop`` (the turn is cancelled) and at shutdown, leftovers stopped when the shell
exits — is done once, here, by :func:`run_command` and by ``agent.hands.jobs`` on top of any runner.

A runner for a sandbox (bubblewrap, docker) implements the same two things: ``spawn`` starts the
command inside it, with ``cwd`` (a folder of the workspace) visible at the same path, and
``Process.stop`` ends everything the command started in there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.hands.output import CappedOutput, pump
from agent.hands.processes import signal_tree
from agent.hands.quota import WorkspaceQuota, unwatch

log = logging.getLogger(__name__)

STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when a command is stopped
DRAIN_SECONDS = 2.0  # after everything was stopped, how long the pipes may take to close
PIPE_LIMIT = 1 << 20  # asyncio's buffer per pipe (reading goes on in chunks whatever a line's length)


class Process(Protocol):
    """A started command. Its ``stdout``/``stderr`` must be read (by the caller) or it may block."""

    @property
    def pid(self) -> int:
        """What ``ps`` shows for it on this machine (for the listing of background jobs)."""
        ...

    @property
    def stdout(self) -> asyncio.StreamReader: ...

    @property
    def stderr(self) -> asyncio.StreamReader: ...

    async def wait(self) -> int:
        """The exit status of the command's shell once it ended (negative: the signal that killed it)."""
        ...

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """End the command and everything it started: SIGTERM, then SIGKILL after ``grace`` seconds for
        what is still there. Returns once nothing of it runs. Also for leftovers after the shell exited."""
        ...

    def kill_now(self) -> None:
        """SIGKILL everything of the command at once, without waiting (a cancelled turn: the caller
        cannot wait). Never raises."""
        ...


class Runner(Protocol):
    """Starts shell commands somewhere (this machine, a sandbox)."""

    name: str  # "local", "bubblewrap", "docker": for the audit and the logs

    async def spawn(self, command: str, *, cwd: Path, env: Mapping[str, str]) -> Process:
        """Start ``command`` (shell text) in ``cwd`` with exactly ``env`` as its environment, stdin
        closed, stdout and stderr as pipes. Raises ``OSError`` when it cannot start."""
        ...


@dataclass(frozen=True)
class RunResult:
    """How a command ended and what it printed."""

    exit_code: int | None  # None: it was stopped before it ended (timed out)
    stdout: CappedOutput
    stderr: CappedOutput
    seconds: float
    timed_out: bool = False
    stopped_because: str | None = None  # stopped by Herald for this reason (the workspace's quota)


async def run_command(
    runner: Runner,
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,  # noqa: ASYNC109 - the command's own limit, not a wait of ours
    limit: int,
    quota: WorkspaceQuota | None = None,
) -> RunResult:
    """Run ``command`` to its end, or stop it after ``timeout`` seconds; its output capped to ``limit``
    bytes per stream. When the shell exits, whatever it left running (``cmd &``) is stopped: a command
    that should go on runs as a background job. Cancelling this (``/stop``) kills the whole tree at once.
    With ``quota``, a command during which the workspace grows past it is stopped."""
    started = time.monotonic()
    process = await spawn(runner, command, cwd=cwd, env=env)
    watch = quota.watch(process) if quota is not None else None
    stdout, stderr = CappedOutput(limit), CappedOutput(limit)
    reading = asyncio.gather(pump(process.stdout, stdout), pump(process.stderr, stderr))
    exit_code: int | None = None
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout):
                exit_code = await process.wait()
        except TimeoutError:
            timed_out = True
        await process.stop()  # what the shell left behind, or everything when it timed out
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN_SECONDS):
                await asyncio.shield(reading)
    except BaseException:
        process.kill_now()
        raise
    finally:
        await unwatch(watch)
        if not reading.done():
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
    return RunResult(
        exit_code,
        stdout,
        stderr,
        time.monotonic() - started,
        timed_out=timed_out,
        stopped_because=watch.reason if watch is not None else None,
    )


async def spawn(runner: Runner, command: str, *, cwd: Path, env: Mapping[str, str]) -> Process:
    """``runner.spawn``, but a cancellation while it starts (``/stop`` at that moment) still kills what
    started: the command may already run, and asyncio would kill only its shell, not its children."""
    starting = asyncio.ensure_future(runner.spawn(command, cwd=cwd, env=env))
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            (await starting).kill_now()
        raise


class LocalProcess:
    """A command run by :class:`LocalRunner`: the leader of a session of its own."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        assert process.stdout is not None and process.stderr is not None  # spawned with pipes
        self._stdout = process.stdout
        self._stderr = process.stderr

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def stdout(self) -> asyncio.StreamReader:
        return self._stdout

    @property
    def stderr(self) -> asyncio.StreamReader:
        return self._stderr

    async def wait(self) -> int:
        return await self._process.wait()

    async def stop(self, grace: float = STOP_GRACE) -> None:
        if not signal_tree(self.pid, signal.SIGTERM):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if not signal_tree(self.pid, signal.SIGCONT):  # wakes a stopped one, so it can end
                return
        self.kill_now()

    def kill_now(self) -> None:
        try:
            signal_tree(self.pid, signal.SIGKILL)
        except Exception:  # never raise in place of the cancellation that called this
            log.exception("stopping command %d failed", self.pid)


class LocalRunner:
    """Runs commands on this machine, as Herald's own user, with ``bash`` (``sh`` where there is none)."""

    name = "local"

    def __init__(self, shell: str | None = None, *, unsandboxed_because: str | None = None) -> None:
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        # tools.sandbox: auto found no sandbox here: why, and what to do (herald doctor warns with it).
        self.unsandboxed_because = unsandboxed_because

    async def spawn(self, command: str, *, cwd: Path, env: Mapping[str, str]) -> LocalProcess:
        process = await asyncio.create_subprocess_exec(
            self.shell,
            "-c",
            command,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=PIPE_LIMIT,
        )
        return LocalProcess(process)
