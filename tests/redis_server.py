"""A real Redis for the tests that need one: Debian's ``redis-server`` on a free loopback port.

``./scripts/test`` installs the ``redis-server`` package when it is missing. Each server has a data
directory of its own and is stopped (and its directory removed) by :meth:`RedisServer.stop`;
:meth:`RedisServer.restart` stops and starts it on the same port, keeping its data when it saved any
(for tests of Redis going away and coming back).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from tests.fakes.waiting import wait_until_sync
from tests.postgres import free_port

START_TIMEOUT = 30.0


class RedisMissing(RuntimeError):
    """No redis-server on this machine; the message says how to install it."""


def binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RedisMissing(
            "the tests need Redis and none is installed: run `sudo apt-get install -y redis-server` "
            "(./scripts/test does it when run as root)"
        )
    return found


class RedisServer:
    def __init__(self) -> None:
        self.binary = binary()
        self.root = Path(tempfile.mkdtemp(prefix="herald-redis-"))
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        options = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root), "--save", ""]
        self._process = subprocess.Popen(
            [self.binary, *options, "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until_sync(self._answers, START_TIMEOUT, what=f"redis-server answering on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as probe:
                probe.sendall(b"PING\r\n")
                return probe.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def halt(self) -> None:
        """Kill the server at once (its data is gone: Redis holds nothing Herald needs to keep)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def restart(self) -> None:
        self.halt()
        self.start()

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.root, ignore_errors=True)
