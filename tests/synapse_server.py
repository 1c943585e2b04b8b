"""A real Matrix homeserver for the tests that need one: Synapse (``matrix-synapse``, a test
dependency) on SQLite in a directory of its own, on a free loopback port.

One server per test session (the ``synapse`` fixture of the tests that use it): it takes seconds to
start, and each test keeps to accounts and rooms of its own (:meth:`SynapseServer.register` makes a
fresh account). Only the client-server API is served: no federation, no registration but the admin
API's (``registration_shared_secret``), rate limits raised far above what a test sends.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import itertools
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.fakes.waiting import wait_until_sync
from tests.postgres import free_port

START_TIMEOUT = 120.0  # a few seconds alone; a loaded 2-core machine may take many times that
REQUEST_TIMEOUT = 30.0
SERVER_NAME = "localhost"
UNLIMITED = {"per_second": 10_000, "burst_count": 10_000}


class SynapseMissing(RuntimeError):
    """Synapse cannot be imported; the message says how to install it."""


@dataclass(frozen=True)
class Account:
    """A user registered on the test homeserver, with an access token of its own."""

    user_id: str
    token: str


def config(root: Path, port: int, secret: str) -> dict[str, Any]:
    """The homeserver's configuration: SQLite in ``root``, one plain-HTTP client listener on 127.0.0.1."""
    return {
        "server_name": SERVER_NAME,
        "pid_file": str(root / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "media_store_path": str(root / "media"),
        "signing_key_path": str(root / "signing.key"),  # generated at the first start
        "registration_shared_secret": secret,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "report_stats": False,
        "enable_registration": False,
        "federation_domain_whitelist": [],
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "presence": {"enabled": False},
        # Synapse answers a sync asked again within 2 minutes from a cache (the same answer): a bot
        # restarted that soon without its stored token would get its old first sync back and lose
        # nothing. Off here, so a restart in a test is one hours later (what the stored token is for).
        "caches": {"sync_response_cache_duration": 0},
        "rc_message": UNLIMITED,
        "rc_registration": UNLIMITED,
        "rc_login": {"address": UNLIMITED, "account": UNLIMITED, "failed_attempts": UNLIMITED},
        "rc_joins": {"local": UNLIMITED, "remote": UNLIMITED},
        "rc_invites": {"per_room": UNLIMITED, "per_user": UNLIMITED, "per_issuer": UNLIMITED},
        "rc_room_creation": UNLIMITED,
    }


def registration_mac(secret: str, nonce: str, username: str, password: str, admin: bool) -> str:
    """The HMAC the admin register API asks for (Synapse's ``register_new_matrix_user`` computes it)."""
    message = b"\x00".join(
        part.encode() for part in (nonce, username, password, "admin" if admin else "notadmin")
    )
    return hmac.new(secret.encode(), message, hashlib.sha1).hexdigest()


class SynapseServer:
    def __init__(self) -> None:
        if importlib.util.find_spec("synapse") is None:
            raise SynapseMissing(
                "the Matrix tests against a real homeserver need Synapse (matrix-synapse, a test "
                "dependency): run `pip install -e '.[test]'` (./scripts/test does it)"
            )
        self.root = Path(tempfile.mkdtemp(prefix="herald-synapse-"))
        self.port = free_port()
        self._secret = secrets.token_hex(16)
        self._names = itertools.count()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / "synapse.log"

    def start(self) -> None:
        path = self.root / "homeserver.yaml"
        path.write_text(json.dumps(config(self.root, self.port, self._secret)))  # JSON is YAML
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "synapse.app.homeserver", "-c", str(path)],
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until_sync(self._answers, START_TIMEOUT, what=f"Synapse answering on port {self.port}")

    def _answers(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Synapse exited with {self._process.returncode} at its start:\n{tail}")
        try:
            with urllib.request.urlopen(f"{self.url}/_matrix/client/versions", timeout=1) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
        shutil.rmtree(self.root, ignore_errors=True)

    async def register(self, name: str) -> Account:
        """A new account ``@NAME-N:localhost`` (N: unique in this session), through the admin API."""
        username = f"{name}-{next(self._names)}"
        password = secrets.token_hex(8)
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(endpoint) as answer:
                answer.raise_for_status()
                nonce = str((await answer.json())["nonce"])
            body = {
                "nonce": nonce,
                "username": username,
                "password": password,
                "admin": False,
                "mac": registration_mac(self._secret, nonce, username, password, False),
            }
            async with session.post(endpoint, json=body) as answer:
                answer.raise_for_status()
                registered = await answer.json()
        return Account(str(registered["user_id"]), str(registered["access_token"]))
