"""A fake platform in a process of its own for the benchmarks: the measured gateway shares no CPU
time or memory with the fake it talks to. One way to start, command and stop such a process; each
platform's fake (``benchmarks.fake_telegram``, ``fake_discord``, ``fake_matrix``, ``fake_slack``) gives
its commands."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from benchmarks.fake_telegram import Answers, Sent, Typing


class PlatformProcess:
    """A fake platform in a process of its own (``module``'s ``serve``), commanded over a connection:
    ``hello`` is what the child sent first (its URLs and token); :meth:`inject` writes to the bot,
    :meth:`answers` reads its replies; a platform's subclass names its ``module`` and says how the
    gateway is configured for it (``section``, ``environ``)."""

    module: str  # whose ``serve(address, port, authkey)`` the child runs

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one command at a time over the connection
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self.hello: tuple[str, ...] = ()

    @staticmethod
    def child(
        address: str, port: int, authkey: str, fake: Any, hello: tuple[str, ...],
        commands: dict[str, Callable[..., Any]],
    ) -> None:  # fmt: skip
        """The child's side: send ``hello``, then run commands on ``fake`` until told to stop."""
        with Client((address, port), authkey=bytes.fromhex(authkey)) as conn:
            conn.send(hello)
            while True:
                name, args = conn.recv()
                if name == "stop":
                    conn.send((True, None))
                    return
                try:
                    conn.send((True, commands[name](fake, *args)))
                except Exception as error:
                    conn.send((False, repr(error)))

    def __enter__(self) -> Self:
        authkey = secrets.token_bytes(16)
        with Listener(("127.0.0.1", 0), authkey=authkey) as listener:
            host, port = listener.address
            code = f"from {self.module} import serve; serve({host!r}, {port}, {authkey.hex()!r})"
            self._process = subprocess.Popen([sys.executable, "-c", code])
            self._conn = listener.accept()
        self.hello = self._conn.recv()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, EOFError, RuntimeError):
            self._request("stop")
        if self._conn is not None:
            self._conn.close()
        if self._process is not None:
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.terminate()
                self._process.wait(10)

    def _request(self, name: str, *args: Any) -> Any:
        if self._conn is None:
            raise RuntimeError(f"the fake platform process ({self.module}) is not running")
        with self._lock:
            self._conn.send((name, args))
            ok, value = self._conn.recv()
        if not ok:
            raise RuntimeError(f"{self.module} command {name} failed: {value}")
        return value

    async def inject(self, messages: list[tuple[int, str, str]]) -> list[Sent]:
        """Direct messages ``(chat, tag, text)`` in order, text ``"<tag>: <text>"``."""
        sent: list[Sent] = await asyncio.to_thread(self._request, "inject", messages)
        return sent

    async def answers(self, chats: list[int]) -> tuple[Answers, Typing]:
        found: tuple[Answers, Typing] = await asyncio.to_thread(self._request, "answers", chats)
        return found

    def section(self, chats: list[int]) -> dict[str, Any]:
        """The platform's config section for the gateway: the fake's URLs, ``chats``' people allowed."""
        raise NotImplementedError

    def environ(self) -> dict[str, str]:
        """The variables the gateway reads (the fake's token)."""
        raise NotImplementedError

    def gateway_section(self) -> dict[str, Any]:
        """Settings of the gateway section the fake needs (a webhook's: the port it POSTs to)."""
        return {}
