"""A real PostgreSQL for the test session: its own data directory, port and lifetime.

The server is started once, on first use, from Debian's binaries (``/usr/lib/postgresql/*/bin``; the
``postgresql`` package, which ``./scripts/test`` installs when it is missing), with ``fsync`` off and
trust authentication on 127.0.0.1. A template database is migrated to Herald's schema once; every test
gets a fresh copy of it (``CREATE DATABASE … TEMPLATE``), dropped afterwards. PostgreSQL refuses to run
as root, so as root the server runs as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url

USER = "herald"
TEMPLATE = "herald_template"
START_TIMEOUT = 60


class PostgresMissing(RuntimeError):
    """No PostgreSQL binaries on this machine; the message says how to install them."""


def binaries() -> Path:
    """The directory with ``initdb``, ``pg_ctl`` and ``psql`` (the newest installed version)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresMissing(
        "the tests need PostgreSQL and none is installed: run `sudo apt-get install -y postgresql` "
        "(./scripts/test does it when run as root)"
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One server for the whole test session; :meth:`new_database` gives each test its own database."""

    def __init__(self) -> None:
        self.bin = binaries()
        self.root = Path(tempfile.mkdtemp(prefix="herald-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._names = itertools.count()
        self._as_root = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [*(("runuser", "-u", "postgres", "--") if self._as_root else ()), *args]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=START_TIMEOUT)

    def start(self) -> None:
        if self._as_root:
            shutil.chown(self.root, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8",
                  "--no-sync", "--locale=C")  # fmt: skip
        self.resume()
        self.sql("postgres", f"CREATE DATABASE {TEMPLATE}")
        asyncio.run(self._migrate(TEMPLATE))

    async def _migrate(self, database: str) -> None:
        async with open_storage(parse_storage_url(self.url(database), Path("unused"))):
            pass

    def url(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def sql(self, database: str, statement: str) -> str:
        psql = [str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-d", database]
        done = subprocess.run(
            [*psql, "-v", "ON_ERROR_STOP=1", "-At", "-c", statement],
            check=True,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
        )
        return done.stdout.strip()

    def new_database(self, *, empty: bool = False) -> str:
        """A fresh database at Herald's schema (``empty``: without any table); returns its URL."""
        name = f"test_{os.getpid()}_{next(self._names)}"
        self.sql("postgres", f"CREATE DATABASE {name} TEMPLATE {'template0' if empty else TEMPLATE}")
        return self.url(name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with contextlib.suppress(subprocess.SubprocessError):
            self.sql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def halt(self) -> None:
        """Stop the server at once, as a crash or a lost host would (connections are cut).

        What was committed is written first: the server runs with ``synchronous_commit=off`` for speed,
        so a crash would lose the last commits, which a production server (``on``) keeps."""
        self.sql("postgres", "CHECKPOINT")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start a halted server again (on the same port, with the same data)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "-t", str(START_TIMEOUT), "start")  # fmt: skip

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
