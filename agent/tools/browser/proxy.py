"""The browser's only way out: a local HTTP proxy that applies ``web_fetch``'s SSRF rule to every connection.

Chromium is started with this proxy for every context, loopback included (Playwright passes
``<-loopback>``, so 127.0.0.1 is not bypassed). Whatever opens a connection — the navigation, a redirect
Chromium follows by itself, a script's ``fetch``/XHR, an image, a WebSocket (Chromium tunnels those
with CONNECT), a preconnect — meets :class:`~agent.tools.web.guard.GuardedBackend`: the host is resolved
once, refused if *any* answer is refused by the session's policy, and the connection goes to a checked
address (no DNS rebinding between the check and the connection). Playwright's ``route`` is not enough on
its own: it does not see requests Chromium makes while following a redirect.

Each browser context gets its own credentials (``Proxy-Authorization``); they select the context's
policy (the owner's or a guest's) and keep other local programs from using the proxy. The proxy forwards
bytes and never reads a page: plain HTTP gets ``Connection: close`` so each client connection carries one
request to one checked host; HTTPS stays end-to-end encrypted through the tunnel.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore

from agent.tools.web.addresses import AddressPolicy
from agent.tools.web.guard import AddressRefused, GuardedBackend, Resolver, system_resolver

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT = 30.0  # seconds a client has to send a request's head
CONNECT_TIMEOUT = 15.0
CHUNK = 64 * 1024
IDLE_TIMEOUT = 300.0  # a tunnel with no byte either way for this long is closed
MAX_BODY_BYTES = 50_000_000  # a form post or an upload the browser sends over plain HTTP
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authorization", b"proxy-connection", b"te", b"trailer", b"upgrade"}
)


@dataclass
class Tenant:
    """One browser context's use of the proxy: its policy and what was refused for it."""

    policy: AddressPolicy
    refused: list[tuple[str, str]] = field(
        default_factory=list
    )  # (URL, why: "10.0.0.1 is a private address")

    def take_refused(self) -> list[tuple[str, str]]:
        """The refusals since the last call (a tool reports them once)."""
        taken, self.refused = self.refused, []
        return taken


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def header(self) -> bytes:
        return b"Basic " + base64.b64encode(f"{self.username}:{self.password}".encode())


class ProxyRequest(Exception):
    """The client's request cannot be forwarded; ``status`` and the message are its answer."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


REASONS = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}


class GuardedProxy:
    """The proxy server on 127.0.0.1 (an ephemeral port): :meth:`start`, then :meth:`aclose`."""

    def __init__(
        self,
        resolver: Resolver = system_resolver,
        connector: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._resolver = resolver
        self._connector = connector
        self._tenants: dict[bytes, Tenant] = {}  # Proxy-Authorization value -> tenant
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, limit=MAX_HEAD_BYTES)

    def admit(self, policy: AddressPolicy) -> tuple[Credentials, Tenant]:
        """New credentials for one browser context, its connections judged by ``policy``."""
        credentials = Credentials("herald", secrets.token_urlsafe(24))
        tenant = Tenant(policy)
        self._tenants[credentials.header()] = tenant
        return credentials, tenant

    def dismiss(self, credentials: Credentials) -> None:
        """The context is closed: its credentials open nothing any more."""
        self._tenants.pop(credentials.header(), None)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT):
                    head = await reader.readuntil(b"\r\n\r\n")
                await self._forward(head, reader, writer)
            except ProxyRequest as refused:
                await answer(writer, refused.status, str(refused))
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass  # a client that said nothing useful: close
        except (ConnectionError, OSError):
            pass  # the browser went away
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _forward(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line, *header_lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ")
        except ValueError:
            raise ProxyRequest(400, "malformed request line") from None
        headers = [parse_header(line) for line in header_lines]
        tenant = self._tenants.get(next((v for k, v in headers if k == b"proxy-authorization"), b""))
        if tenant is None:
            raise ProxyRequest(407, "proxy credentials needed")
        if method == "CONNECT":
            host, port = split_authority(target, default_port=443)
            upstream = await self._connect(tenant, host, port, f"https://{target}")
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
            await tunnel(reader, writer, upstream, first=b"")
            return
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            raise ProxyRequest(400, f"only absolute http URLs are proxied, not {target[:100]}")
        upstream = await self._connect(tenant, parts.hostname, parts.port or 80, target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [(k, v) for k, v in headers if k not in HOP_BY_HOP]
        rewritten = f"{method} {path} {version}\r\n".encode("latin-1") + b"".join(
            k + b": " + v + b"\r\n" for k, v in [*kept, (b"connection", b"close")]
        )
        body = b""
        chunked = any(k == b"transfer-encoding" for k, _ in headers)  # a body piped as it comes
        if not chunked:
            length = next((v for k, v in headers if k == b"content-length"), b"0")
            if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                await upstream.aclose()
                raise ProxyRequest(400, "a request body must have a length under 50 MB")
            async with asyncio.timeout(HEAD_TIMEOUT):
                body = await reader.readexactly(int(length))
        # With the whole request sent, the browser's connection carries nothing more upstream: a request
        # it might send next on it (for another host) is never forwarded to this one.
        await tunnel(reader, writer, upstream, first=rewritten + b"\r\n" + body, answer_only=not chunked)

    async def _connect(self, tenant: Tenant, host: str, port: int, url: str) -> httpcore.AsyncNetworkStream:
        backend = GuardedBackend(tenant.policy, self._resolver, self._connector)
        try:
            return await backend.connect_tcp(host.strip("[]"), port, timeout=CONNECT_TIMEOUT)
        except AddressRefused as refused:
            tenant.refused.append((url, str(refused)))
            raise ProxyRequest(403, f"refused: {refused}") from None
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
            raise ProxyRequest(502, f"could not connect to {host}:{port} ({error or 'no answer'})") from None


def parse_header(line: bytes) -> tuple[bytes, bytes]:
    name, _, value = line.partition(b":")
    return name.strip().lower(), value.strip()


def split_authority(authority: str, *, default_port: int) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets) as host and port."""
    host, sep, port = authority.rpartition(":")
    if not sep or host.endswith(":") or (host.startswith("[") and not host.endswith("]")):
        return authority, default_port
    try:
        return host, int(port)
    except ValueError:
        raise ProxyRequest(400, f"bad port in {authority[:100]}") from None


async def answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = f"Herald's browser: {text}\n".encode()
    extra = b'Proxy-Authenticate: Basic realm="herald"\r\n' if status == 407 else b""
    writer.write(
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n".encode()
        + extra
        + b"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def tunnel(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream: httpcore.AsyncNetworkStream,
    *,
    first: bytes,
    answer_only: bool = False,
) -> None:
    """Bytes both ways between the browser and ``upstream`` until either side closes or goes idle;
    ``answer_only``: after ``first``, only the upstream's answer (the request was sent whole)."""
    try:
        if first:
            await upstream.write(first, timeout=CONNECT_TIMEOUT)

        async def up() -> None:
            while True:
                async with asyncio.timeout(IDLE_TIMEOUT):
                    chunk = await reader.read(CHUNK)
                if not chunk:
                    return
                await upstream.write(chunk, timeout=IDLE_TIMEOUT)

        async def down() -> None:
            pending = await closing_head(upstream) if answer_only else b""
            while chunk := pending or await upstream.read(CHUNK, timeout=IDLE_TIMEOUT):
                pending = b""
                writer.write(chunk)
                async with asyncio.timeout(IDLE_TIMEOUT):
                    await writer.drain()

        await (down() if answer_only else first_done(up(), down()))
    except (TimeoutError, httpcore.NetworkError, httpcore.TimeoutException, ConnectionError, OSError):
        pass
    finally:
        await upstream.aclose()


async def closing_head(upstream: httpcore.AsyncNetworkStream) -> bytes:
    """The start of the upstream's answer with its head saying ``Connection: close``, so the browser never
    sends another request on this connection (it would reach this host whatever host it named)."""
    received = b""
    while b"\r\n\r\n" not in received and len(received) < MAX_HEAD_BYTES:
        chunk = await upstream.read(CHUNK, timeout=IDLE_TIMEOUT)
        if not chunk:
            break
        received += chunk
    head, sep, rest = received.partition(b"\r\n\r\n")
    if not sep:
        return received
    status, *lines = head.split(b"\r\n")
    kept = [line for line in lines if parse_header(line)[0] not in (b"connection", b"keep-alive")]
    return b"\r\n".join([status, *kept, b"Connection: close"]) + sep + rest


async def first_done(*coroutines: Coroutine[Any, Any, None]) -> None:
    """Run the coroutines until the first ends; cancel the rest."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
