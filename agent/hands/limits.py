"""The resource limits of a sandboxed command, and how they are put on it.

CPU time, memory (address space) and file size are ``setrlimit`` limits, set by ``prlimit`` on the
sandbox's first process and inherited by everything it starts. The number of processes is a ``pids``
cgroup (v1's ``pids`` hierarchy, or v2 where ``pids`` is delegated to Herald's cgroup): ``RLIMIT_NPROC``
counts per user across the machine and does not bind root at all, so it is only the fallback when no
cgroup can be made (:func:`pids_hierarchy` says which, and ``herald doctor`` says so).
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from agent.settings import ToolsSettings

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_PREFIX = f"herald-sandbox-{os.getpid()}-"
_numbers = itertools.count(1)


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int
    memory_mb: int
    processes: int
    file_mb: int
    scratch_mb: int  # bubblewrap: the size of each private /tmp, /run and home

    @classmethod
    def of(cls, settings: ToolsSettings) -> SandboxLimits:
        return cls(
            settings.sandbox_cpu_seconds,
            settings.sandbox_memory_mb,
            settings.sandbox_processes,
            settings.sandbox_file_mb,
            settings.sandbox_scratch_mb,
        )


def prlimit_argv(limits: SandboxLimits, *, with_nproc: bool) -> list[str]:
    """``prlimit`` options that put ``limits`` on the process it starts (soft = hard: no raising them)."""
    argv = [
        "prlimit",
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_mb * 1024 * 1024}",
        f"--fsize={limits.file_mb * 1024 * 1024}",
        "--core=0",
    ]
    if with_nproc:
        argv.append(f"--nproc={limits.processes}")
    return [*argv, "--"]


def cgroup_paths(proc_self_cgroup: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Where Herald's own ``pids`` cgroup is, from ``/proc/self/cgroup``: v1's hierarchy first, then v2."""
    found = []
    for line in proc_self_cgroup.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "pids" in controllers.split(","):
            found.append(root / "pids" / path.lstrip("/"))
        elif number == "0" and controllers == "":
            found.append(root / path.lstrip("/"))
    return found


def pids_hierarchy() -> Path | None:
    """A cgroup folder under which Herald can make a group with a ``pids.max`` (None: there is none)."""
    try:
        own = Path("/proc/self/cgroup").read_text(encoding="utf-8")
    except OSError:
        return None
    for base in cgroup_paths(own):
        probe = base / f"{GROUP_PREFIX}probe"
        try:
            probe.mkdir(exist_ok=True)
            usable = (probe / "pids.max").exists() and (probe / "cgroup.procs").exists()
            probe.rmdir()
        except OSError:
            continue
        if usable:
            return base
    return None


class PidsGroup:
    """A cgroup of its own for one command, holding at most ``processes`` processes; removed at its end."""

    def __init__(self, base: Path, processes: int) -> None:
        self.path = base / f"{GROUP_PREFIX}{next(_numbers)}"
        self.path.mkdir()
        try:
            (self.path / "pids.max").write_text(str(processes))
        except OSError:
            self.remove()
            raise

    @property
    def procs(self) -> Path:
        """The file a process writes its pid into to join (the command's first step, before anything)."""
        return self.path / "cgroup.procs"

    def empty(self) -> bool:
        try:
            return not (self.path / "cgroup.procs").read_text().strip()
        except OSError:
            return True

    def remove(self) -> bool:
        """Remove the group once it is empty; False when a process left in it keeps it there (logged)."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as error:
            log.warning("sandbox cgroup %s not removed: %s", self.path, error.strerror)
            return False
        return True
