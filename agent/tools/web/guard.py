"""The connection guard: every TCP connection ``web_fetch`` opens goes to an address the policy
allowed, and to exactly that address.

Checking a URL's host before the request is not enough: the HTTP client would resolve the name again
when it connects, and a name can answer with a public address to the check and 127.0.0.1 to the
connection (DNS rebinding). So the check sits where the connection is made: :class:`GuardedBackend`
is an httpcore network backend whose ``connect_tcp`` resolves the name once, refuses the connection
if the policy refuses *any* of the answers, and connects to a checked address itself. TLS still
verifies the certificate against the host name (httpcore passes the URL's host as the server name).

httpx's own transport does not take a network backend, so :class:`GuardedTransport` puts httpx's
public transport interface over an httpcore connection pool built with one (both are public APIs).
A redirect is a new request, so each hop meets the guard again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

import httpcore
import httpx

from agent.tools.web.addresses import AddressPolicy, IPAddress

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

MAX_CONNECTIONS = 20
MAX_KEEPALIVE = 10
KEEPALIVE_EXPIRY = 30.0


class AddressRefused(Exception):
    """The policy refused an address the host resolved to; the message says why (naming the address only
    when the URL held it)."""


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to for a TCP connection, in the resolver's order, no repeats."""
    try:
        answers = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise httpcore.ConnectError(f"{host} does not resolve ({error.strerror})") from error
    addresses: list[IPAddress] = []
    for *_, sockaddr in answers:
        address = ipaddress.ip_address(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is one (no DNS needed), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks every answer against ``policy``, connects to a checked address."""

    def __init__(
        self,
        policy: AddressPolicy,
        resolver: Resolver = system_resolver,
        connector: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.policy = policy
        self.resolver = resolver
        self.connector = connector or httpcore.AnyIOBackend()

    async def checked_addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses to try for ``host``; AddressRefused if the policy refuses any of them."""
        literal = literal_address(host)
        addresses = [literal] if literal is not None else await self.resolver(host, port)
        if not addresses:
            raise httpcore.ConnectError(f"{host} does not resolve (no addresses)")
        for address in addresses:
            reason = self.policy.refusal(address, port, None if literal is not None else host)
            if reason is not None:
                raise AddressRefused(reason)
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                addresses = await self.checked_addresses(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"{host} did not resolve in time") from None
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:
            try:
                return await self.connector.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None  # there was at least one address
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("unix sockets are never connected to")

    async def sleep(self, seconds: float) -> None:
        await self.connector.sleep(seconds)


# httpcore's errors as httpx's, subclasses before their bases (what httpx's own transport does).
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextlib.contextmanager
def httpx_errors() -> Iterator[None]:
    """Raise httpcore's exceptions as the httpx exceptions callers of an httpx client expect."""
    try:
        yield
    except Exception as error:
        for core_type, httpx_type in _ERRORS:
            if isinstance(error, core_type):
                raise httpx_type(str(error)) from error
        raise


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with httpx_errors():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose connections all go through ``backend``."""

    def __init__(
        self, backend: httpcore.AsyncNetworkBackend, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_KEEPALIVE,
            keepalive_expiry=KEEPALIVE_EXPIRY,
            network_backend=backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
