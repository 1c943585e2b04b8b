"""Finding and ending every process a command started, not only the shell that ran it.

Each command runs as the leader of a session of its own (``start_new_session``), so its children share
its session and process group. To stop it, Herald signals that group, then every process left in the
session or descended from the leader (a child that made a group of its own with ``setpgid``, a
``nohup``-ed grandchild); ``/proc`` tells who they are. A process that leaves the session (``setsid``)
and double-forks escapes: a sandbox (``tools.sandbox``) is the boundary for that.

Linux only where it matters (``/proc``); elsewhere the group is signalled and nothing more.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    group: int
    session: int
    state: str  # "Z": a zombie, dead already (only its parent's wait is missing)


def read_stat(pid: int) -> ProcessInfo | None:
    """``/proc/PID/stat`` of a process, None when it is gone (or there is no ``/proc``)."""
    try:
        raw = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": the command name may hold spaces and parentheses.
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcessInfo(pid, int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    except (IndexError, ValueError):
        return None


def all_processes() -> list[ProcessInfo]:
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if entry.name.isdigit() and (info := read_stat(int(entry.name))) is not None:
                found.append(info)
    return found


def tree(leader: int) -> set[int]:
    """The living processes of ``leader``'s session or group, and their descendants.

    Membership, not the leader's pid, is the root: once the leader is gone its pid may be given to
    another process, but not while its session or group still has a member."""
    processes = [info for info in all_processes() if info.state != "Z"]
    members = {info.pid for info in processes if leader in (info.session, info.group)}
    children: dict[int, list[int]] = {}
    for info in processes:
        children.setdefault(info.ppid, []).append(info.pid)
    stack = list(members)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in members:
                members.add(child)
                stack.append(child)
    return members


def signal_tree(leader: int, sig: signal.Signals) -> set[int]:
    """Send ``sig`` to ``leader``'s group and to every process of its tree; returns who was signalled."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)
    members = tree(leader)
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return members


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it only waits for its parent to read its status)."""
    info = read_stat(pid)
    if info is not None:
        return info.state != "Z"
    if PROC.is_dir():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
