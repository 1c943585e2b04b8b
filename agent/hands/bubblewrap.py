"""Commands in a bubblewrap sandbox (``tools.sandbox: bubblewrap``, or ``auto`` where bwrap works).

The sandbox is built up from nothing rather than from the machine's root, so what it can reach is a
list, not "everything but": the system's programs and settings read-only (:data:`SYSTEM`), the workspace
and ``tools.allowed_paths`` writable at their own paths (so paths in commands and in the file tools
agree), and empty private folders over ``/tmp``, ``/var/tmp``, ``/run`` and the homes. A read-only view of
``/`` would leave every UNIX socket on the machine connectable (the Docker socket, the user's systemd bus,
PostgreSQL with peer authentication, ssh-agent): ``connect()`` ignores a read-only mount. Herald's home is
hidden (an empty folder: its ``.env``, keys and database are not readable from inside), and so are the
owner's files anywhere else. There are no capabilities and no network unless ``tools.sandbox_network``
(new namespaces for everything else: processes, IPC, hostname). The environment is exactly the one given
(``toolbox.command_environment``: never Herald's keys and tokens). Limits: ``agent.hands.limits``.

It is started like a local command (a session of its own), so :class:`~agent.hands.runner.LocalProcess`
stops it unchanged: every process of the sandbox descends from the ``bwrap`` Herald started, and
``--die-with-parent`` plus the sandbox's own process namespace end whatever is left when it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.hands.limits import PidsGroup, SandboxLimits, pids_hierarchy, prlimit_argv
from agent.hands.paths import inside, real
from agent.hands.runner import PIPE_LIMIT, STOP_GRACE, LocalProcess

REAP_SECONDS = 2.0  # after a stop, how long the sandbox may take to leave its cgroup
PROBE_TIMEOUT = 10.0  # seconds for ``bwrap ... true`` to say whether sandboxes can be made here
# The first step of a command with a pids cgroup: join it (pid into cgroup.procs), then become the sandbox.
JOIN_CGROUP = 'echo $$ > "$1" && shift && exec "$@"'
# What commands need of the machine, bound read-only where it exists (a symbolic link, as /bin is on a
# merged-/usr system, is made again as the same link). Nothing else of the machine is there.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# Empty, private and writable in each sandbox, each at most ``scratch_mb`` (the homes hide the owner's files).
SCRATCH = ("/tmp", "/var/tmp", "/run", "/home", "/root")


class BubblewrapMissing(Exception):
    """bubblewrap cannot make a sandbox here; the message says why and what to do."""


@dataclass(frozen=True)
class Layout:
    """What the sandbox sees: the folders it may write, and Herald's home, which it must not read."""

    workspace: Path
    writable: tuple[Path, ...]  # tools.allowed_paths (real paths)
    hidden: Path | None  # Herald's home

    @classmethod
    def of(cls, workspace: Path, allowed: Iterable[Path], herald_home: Path | None) -> Layout:
        return cls(
            real(workspace), tuple(real(path) for path in allowed), real(herald_home) if herald_home else None
        )


def mounts(layout: Layout) -> list[str]:
    """bwrap's mount options past the read-only root: later mounts cover earlier ones, so Herald's home is
    hidden after what lies above it is bound, and what lies inside it (the default workspace) after that."""
    hidden = layout.hidden

    def in_home(path: Path) -> bool:
        return hidden is not None and inside(path, hidden)

    # A folder that is not there yet (an allowed path never made, doctor before the first run) is left
    # out: bwrap would refuse to start at all, and a command could not make it without its parent.
    existing = {path for path in (layout.workspace, *layout.writable) if path.is_dir()}
    writable = sorted(existing, key=lambda path: len(path.parts))
    options: list[str] = []
    for path in (p for p in writable if not in_home(p)):
        options += ["--bind", str(path), str(path)]
    if hidden is not None:
        options += ["--tmpfs", str(hidden)]
    for path in (p for p in writable if in_home(p)):
        options += ["--bind", str(path), str(path)]
    return options


def system_mounts(root: Path = Path("/")) -> list[str]:
    """Read-only binds of :data:`SYSTEM` as this machine has it (``root`` is for tests)."""
    options: list[str] = []
    for name in SYSTEM:
        path = root / name.lstrip("/")
        if path.is_symlink():
            options += ["--symlink", str(path.readlink()), name]
        elif path.is_dir():
            options += ["--ro-bind", str(path), name]
    return options


def bwrap_argv(
    command: str,
    *,
    shell: str,
    cwd: Path,
    layout: Layout,
    network: bool,
    scratch_mb: int,
    bwrap: str = "bwrap",
) -> list[str]:
    """The ``bwrap`` command line that runs ``command`` with ``shell -c`` in the sandbox."""
    scratch: list[str] = []
    for path in SCRATCH:
        scratch += ["--size", str(scratch_mb * 1024 * 1024), "--tmpfs", path]
    return [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        *(["--share-net"] if network else []),
        "--cap-drop",
        "ALL",
        *system_mounts(),
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        *scratch,
        "--symlink",
        "../run",
        "/var/run",
        *mounts(layout),
        "--remount-ro",  # the sandbox's own root, where the mounts above stand: nothing else is writable
        "/",
        "--chdir",
        str(cwd),
        "--",
        shell,
        "-c",
        command,
    ]


def probe(bwrap: str) -> str | None:
    """Why ``bwrap`` cannot make a sandbox here (None: it can), by making one that runs ``true``."""
    try:
        done = subprocess.run(
            [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap could not be run ({error})"
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    reason = said[-1] if said else f"exit code {done.returncode}"
    if "namespace" in reason.lower():
        return (
            f"bwrap cannot create namespaces ({reason}): user namespaces are off; enable them "
            "(sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0) "
            "or run Herald as root"
        )
    return f"bwrap fails to make a sandbox: {reason}"


# Run inside a sandbox by :func:`reach`: the topmost folders a command can write, then every UNIX socket it
# can see. ``-writable`` asks access(2), which answers no on a read-only mount even to root.
SURVEY = (
    "find / \\( -path /proc -o -path /sys \\) -prune -o -type d -writable -print -prune 2>/dev/null; "
    "echo '--'; find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null"
)
SURVEY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Reach:
    """What a command in the sandbox can reach, as one found it from inside (``herald doctor``)."""

    writable: tuple[str, ...]  # the topmost folders it can write in
    sockets: tuple[str, ...]  # the UNIX sockets it can see (and so connect to)


def reach(runner: BubblewrapRunner) -> Reach:
    """Run :data:`SURVEY` in a sandbox as commands get it; raises ``OSError`` or ``TimeoutExpired``."""
    cwd = runner.layout.workspace if runner.layout.workspace.is_dir() else Path("/")
    done = subprocess.run(
        runner.argv(SURVEY, cwd, None), capture_output=True, timeout=SURVEY_TIMEOUT, check=False, cwd=cwd
    )
    writable, _, sockets = done.stdout.decode(errors="replace").partition("--\n")
    return Reach(tuple(writable.splitlines()), tuple(sockets.splitlines()))


class BubblewrapProcess(LocalProcess):
    """A sandboxed command; its process cgroup is removed once the command ended, whether it was stopped
    or killed by a cancelled turn (which cannot wait for that, so a task of its own does)."""

    def __init__(self, process: asyncio.subprocess.Process, group: PidsGroup | None) -> None:
        super().__init__(process)
        self.group = group
        self._releasing: asyncio.Task[None] | None = None

    async def stop(self, grace: float = STOP_GRACE) -> None:
        await super().stop(grace)
        releasing = self._release()
        if releasing is not None:
            await asyncio.shield(releasing)

    def kill_now(self) -> None:
        super().kill_now()
        self._release()

    def _release(self) -> asyncio.Task[None] | None:
        """The one task that removes the cgroup once the sandbox has left it (None: there is none)."""
        if self.group is not None and self._releasing is None:
            self._releasing = asyncio.get_running_loop().create_task(
                self._release_group(), name=f"sandbox-cgroup-{self.pid}"
            )
        return self._releasing

    async def _release_group(self) -> None:
        group = self.group
        if group is None:
            return
        with contextlib.suppress(TimeoutError):  # reaped, bwrap leaves the group (a zombie stays in it)
            async with asyncio.timeout(REAP_SECONDS):
                await self.wait()
                while not group.empty():  # noqa: ASYNC110 - cgroup.procs has no event to await
                    await asyncio.sleep(0.02)
        if group.remove():
            self.group = None

    @property
    def ended(self) -> bool:
        return self._process.returncode is not None


class BubblewrapRunner:
    """Runs each command in a sandbox of its own. Build it with :meth:`find`, which checks it can."""

    name = "bubblewrap"

    def __init__(
        self,
        *,
        bwrap: str,
        shell: str,
        layout: Layout,
        network: bool,
        limits: SandboxLimits,
        cgroups: Path | None,
    ) -> None:
        self.bwrap = bwrap
        self.shell = shell
        self.layout = layout
        self.network = network
        self.limits = limits
        self.cgroups = cgroups  # where each command gets its pids cgroup (None: RLIMIT_NPROC only)
        self._started: list[BubblewrapProcess] = []  # commands whose cgroup may still be there

    @classmethod
    def find(cls, *, layout: Layout, network: bool, limits: SandboxLimits) -> BubblewrapRunner:
        """The runner, once a sandbox was made here; :class:`BubblewrapMissing` saying why it cannot."""
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise BubblewrapMissing("bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
        if shutil.which("prlimit") is None:
            raise BubblewrapMissing("prlimit is not installed (it sets the limits; Debian: util-linux)")
        problem = probe(bwrap)
        if problem is not None:
            raise BubblewrapMissing(problem)
        shell = shutil.which("bash") or "/bin/sh"
        return cls(
            bwrap=bwrap, shell=shell, layout=layout, network=network, limits=limits, cgroups=pids_hierarchy()
        )

    def argv(self, command: str, cwd: Path, group: PidsGroup | None) -> list[str]:
        sandbox = bwrap_argv(
            command,
            shell=self.shell,
            cwd=cwd,
            layout=self.layout,
            network=self.network,
            scratch_mb=self.limits.scratch_mb,
            bwrap=self.bwrap,
        )
        limited = [*prlimit_argv(self.limits, with_nproc=group is None), *sandbox]
        if group is None:
            return limited
        return ["/bin/sh", "-c", JOIN_CGROUP, "herald-sandbox", str(group.procs), *limited]

    async def spawn(self, command: str, *, cwd: Path, env: Mapping[str, str]) -> BubblewrapProcess:
        self._sweep()
        group = PidsGroup(self.cgroups, self.limits.processes) if self.cgroups is not None else None
        argv = self.argv(command, cwd, group)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=dict(env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=PIPE_LIMIT,
            )
        except BaseException:
            if group is not None:
                group.remove()
            raise
        started = BubblewrapProcess(process, group)
        if group is not None:
            self._started.append(started)
        return started

    def _sweep(self) -> None:
        """Forget the commands whose cgroup is gone; retry removing those a command left processes in."""
        for process in list(self._started):
            group = process.group
            if group is not None and process.ended and group.empty() and group.remove():
                process.group = group = None
            if group is None:
                self._started.remove(process)
