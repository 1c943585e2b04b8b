"""The operator console under test: a running gateway (fake Telegram, provider emulator) serving it, and
an HTTP client that logs in like a browser does (cookies, the CSRF token read from the page)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from gateway.console.attempts import LoginAttempts
from gateway.console.server import CONSOLE_WEB
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.gateway_support import Harness, telegram_gateway

CONSOLE_TOKEN = "console-token-for-tests-0123456789"
SAMPLES = {"{job_id}": "abc123", "{change}": "pause", "{decision}": "approve"}  # path variables
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class ConsoleHarness:
    harness: Harness
    url: str  # http://127.0.0.1:PORT (the gateway's HTTP server)

    @property
    def app(self) -> web.Application:
        """The console's application, as mounted on the gateway's HTTP server."""
        return self.harness.gateway.http.mounted["/console"]

    @property
    def attempts(self) -> LoginAttempts:
        """What counts and slows down its failed logins."""
        return self.app[CONSOLE_WEB].attempts

    def routes(self) -> list[tuple[str, str]]:
        """Every (method, path) the console serves, with sample values in the path's variables."""
        found = []
        for route in self.app.router.routes():
            if route.method == "HEAD":
                continue
            path = route.resource.canonical if route.resource else ""
            for variable, sample in SAMPLES.items():
                path = path.replace(variable, sample)
            found.append((route.method, path))
        return found


@asynccontextmanager
async def console_gateway(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    *,
    token: str | None = CONSOLE_TOKEN,
    environ: Mapping[str, str] | None = None,
    **sections: Any,
) -> AsyncIterator[ConsoleHarness]:
    """A gateway serving the console; ``token``: HERALD_CONSOLE_TOKEN (None: links from the bot only)."""
    variables = dict(environ or {})
    if token is not None:
        variables["HERALD_CONSOLE_TOKEN"] = token
    scheduler = {"poll_interval": 0.1, **sections.pop("scheduler", {})}
    async with telegram_gateway(
        home, emulator, emulator_url, environ=variables, scheduler=scheduler, **sections
    ) as harness:
        yield ConsoleHarness(harness, harness.gateway.http.url)


class HeldBack:
    """A failed login's sleep on virtual time: records each delay; returns at once, or when released
    (``hold()``)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.waiting = 0  # failures held now
        self._released: asyncio.Event | None = None

    def hold(self) -> None:
        self._released = asyncio.Event()

    def release(self) -> None:
        if self._released is not None:
            self._released.set()

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self._released is not None:
            self.waiting += 1
            try:
                await self._released.wait()
            finally:
                self.waiting -= 1


class ConsoleClient:
    """An HTTP client with a cookie jar, as a browser (no redirects followed unless asked)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = aiohttp.ClientSession(
            cookie_jar=aiohttp.CookieJar(unsafe=True),  # cookies of 127.0.0.1 (an address, not a name)
            timeout=aiohttp.ClientTimeout(total=20),
        )

    async def close(self) -> None:
        await self.session.close()

    async def get(self, path: str, *, follow: bool = False) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.session.get(self.url + path, allow_redirects=follow) as response:
            return response.status, await response.text(), response

    async def post(
        self, path: str, data: Mapping[str, str], *, follow: bool = False
    ) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.session.post(self.url + path, data=dict(data), allow_redirects=follow) as response:
            return response.status, await response.text(), response

    async def csrf(self, path: str = "/console/") -> str:
        """The CSRF token the forms of ``path`` carry."""
        status, text, _ = await self.get(path)
        assert status == 200, (status, text[:300])
        found = CSRF.search(text)
        assert found, f"no CSRF token on {path}"
        return found.group(1)

    async def login(self, token: str = CONSOLE_TOKEN) -> aiohttp.ClientResponse:
        form = await self.csrf("/console/login")
        status, text, response = await self.post("/console/login", {"csrf": form, "token": token})
        assert status == 303, (status, text[:300])
        return response

    async def login_with_link(self, secret: str) -> aiohttp.ClientResponse:
        """Log in with a one-time link's ``secret``, as its page's form sends it."""
        form = await self.csrf(f"/console/login?link={secret}")
        status, text, response = await self.post("/console/login", {"csrf": form, "link": secret})
        assert status == 303, (status, text[:300])
        return response


@asynccontextmanager
async def console_client(url: str) -> AsyncIterator[ConsoleClient]:
    client = ConsoleClient(url)
    try:
        yield client
    finally:
        await client.close()
