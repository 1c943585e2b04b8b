"""What a running process holds, read from outside through ``/proc`` (Linux): the measured process
does nothing to be measured, so a benchmark can watch gateways that run as processes of their own."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

Pid = int | str  # a process id, or "self"

ESTABLISHED, LISTEN = "01", "0A"  # the state column of /proc/net/tcp


def status_value(pid: Pid, field: str) -> int:
    """The number of a field of ``/proc/PID/status`` (``VmRSS`` in KiB, ``Threads``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def rss_kb(pid: Pid = "self") -> int:
    """The resident set size (``VmRSS``), in KiB."""
    return status_value(pid, "VmRSS")


def threads(pid: Pid) -> int:
    return status_value(pid, "Threads")


def open_files(pid: Pid) -> int:
    """Open file descriptors: files, sockets, pipes."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_inodes(pid: Pid) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


@dataclass(frozen=True)
class TcpSocket:
    local_port: int
    remote_port: int
    state: str  # ESTABLISHED, LISTEN, ...


def tcp_sockets(pid: Pid) -> list[TcpSocket]:
    """The process's TCP sockets: its socket descriptors matched with the kernel's connection table."""
    inodes = socket_inodes(pid)
    sockets = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if inode in inodes:
                sockets.append(TcpSocket(_port(local), _port(remote), state))
    return sockets


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def tcp_connections(pid: Pid, port: int) -> int:
    """The process's established TCP connections to ``port`` on any address (a server's clients, say
    Redis's, counted per process)."""
    return sum(s.state == ESTABLISHED and s.remote_port == port for s in tcp_sockets(pid))


def connections_to_itself(pid: Pid) -> Counter[int]:
    """Per port the process listens on, its established connections from its own clients (a test's
    in-process servers and the pools that keep connections to them alive). Each holds two descriptors,
    the client's and the server's."""
    sockets = tcp_sockets(pid)
    listening = {s.local_port for s in sockets if s.state == LISTEN}
    client_ports = {s.local_port for s in sockets if s.state == ESTABLISHED and s.remote_port in listening}
    return Counter(
        s.local_port
        for s in sockets
        if s.state == ESTABLISHED and s.local_port in listening and s.remote_port in client_ports
    )
