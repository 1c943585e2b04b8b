"""A real PostgreSQL for the test session: its own data directory, port and lifetime.

The server is started once, on first use, from Debian's binaries (``/usr/lib/postgresql/*/bin``; the
``postgresql`` package, which ``./scripts/test`` installs when it is missing), with ``fsync`` off and
trust authentication on 127.0.0.1. A template database is migrated to Herald's schema once; every test
gets a fresh copy of it (``CREATE DATABASE … TEMPLATE``), dropped afterwards. The session's server makes
the next copies and drops the used ones in a thread of its own (:class:`DatabaseMaker`), while tests
run: a test starts on a database that is ready instead of waiting for two ``psql`` round trips.
PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user the package
creates.
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
import threading
from collections import deque
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
        self._maker: DatabaseMaker | None = None

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

    def make_ahead(self, count: int) -> None:
        """Keep ``count`` copies of the template ready, and drop used databases, in a thread (for the
        session's server, which is never halted; a server a test halts makes its databases itself)."""
        self._maker = DatabaseMaker(self, count)

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
        if self._maker is not None and not empty:
            return self.url(self._maker.take())
        return self.url(self.create(empty=empty))

    def create(self, *, empty: bool = False) -> str:
        """Make a database now (a copy of the template, or ``empty``); returns its name."""
        name = f"test_{os.getpid()}_{next(self._names)}"
        self.sql("postgres", f"CREATE DATABASE {name} TEMPLATE {'template0' if empty else TEMPLATE}")
        return name

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        if self._maker is not None:
            self._maker.drop_later(name)
        else:
            self.drop_now(name)

    def drop_now(self, name: str) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self.sql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def halt(self) -> None:
        """Stop the server at once, as a crash would (connections are cut); every commit it acknowledged
        survives, as on a production server.

        That holds because ``synchronous_commit`` stays ``on``: a commit returns once its WAL is written to
        the kernel, which an immediate stop does not lose (``fsync=off`` only skips the flush to disk). With
        ``off``, the commits of the last few hundred milliseconds were lost: in a chaos test, updates
        Telegram had already been told were stored."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start a halted server again (on the same port, with the same data)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=300"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "-t", str(START_TIMEOUT), "start")  # fmt: skip

    def stop(self) -> None:
        if self._maker is not None:
            self._maker.stop()
        if self.data.exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


class DatabaseMaker:
    """A thread that keeps ``count`` template copies ready and drops the databases tests are done with
    (making comes first: a test may be waiting for one)."""

    def __init__(self, server: PostgresServer, count: int) -> None:
        self._server = server
        self._count = count
        self._ready: deque[str] = deque()
        self._to_drop: deque[str] = deque()
        self._changed = threading.Condition()
        self._stopping = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="test databases", daemon=True)
        self._thread.start()

    def take(self) -> str:
        """A ready database's name (waits for the thread; makes one here if the thread failed)."""
        with self._changed:
            self._changed.notify_all()
            if not self._changed.wait_for(lambda: self._ready or self._failure, timeout=START_TIMEOUT):
                raise TimeoutError(f"no test database was made within {START_TIMEOUT}s")
            if self._ready:
                name = self._ready.popleft()
                self._changed.notify_all()  # room for the next one
                return name
        return self._server.create()  # the thread failed: its error shows in this test instead

    def drop_later(self, name: str) -> None:
        with self._changed:
            self._to_drop.append(name)
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout=START_TIMEOUT)

    def _work(self) -> None:
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(
                        lambda: self._stopping or len(self._ready) < self._count or bool(self._to_drop)
                    )
                    if self._stopping:
                        return
                    make = len(self._ready) < self._count
                    dropping = None if make else self._to_drop.popleft()
                if dropping is not None:
                    self._server.drop_now(dropping)
                    continue
                name = self._server.create()
                with self._changed:
                    self._ready.append(name)
                    self._changed.notify_all()
        except BaseException as error:  # handed to the tests waiting, as their failure
            with self._changed:
                self._failure = error
                self._changed.notify_all()
