"""The gateway's HTTP server: ``/healthz``, ``/readyz``, ``/metrics`` and platform webhooks.

``/healthz`` answers while the process runs. ``/readyz`` answers 200 only when every adapter is
connected, the database takes a write and every extra :class:`ReadinessCheck` passes (a cluster's
Redis answers, its work queue takes work), each within :data:`READY_PROBE_SECONDS`, else 503 with
what is wrong (for a load balancer or systemd's watchdog scripts); in a cluster the report also says
this process's name, role and leases. ``/metrics`` is Prometheus' text format. An adapter with a
``webhook_path`` gets its POSTs and GETs routed to it (a platform's webhook mode). Applications mounted before
``start`` serve under their prefix (the operator console at ``/console``, the OpenAI-compatible API at
``/v1``); one with long requests says how to drain them at shutdown.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from aiohttp import web

from adapters.base import Adapter
from gateway.failures import EXIT_UNUSABLE, CommandFailed
from gateway.home.facts import GatewayFacts
from gateway.server.readiness import ReadinessCheck

log = logging.getLogger(__name__)

READY_PROBE_SECONDS = 3.0

MAX_WEBHOOK_BODY = 4 * 1024 * 1024
SHUTDOWN_TIMEOUT = 5.0


class Exposition(Protocol):
    """What ``/metrics`` serves: one process's metrics (``GatewayMetrics``), or several bots' together."""

    def render(self) -> bytes: ...


def cannot_listen(host: str, port: int, error: OSError) -> str:
    """Why the server cannot listen on ``host:port``, in the words of the setting that fixes it (the
    port is the usual culprit: another gateway, or another program, already has it)."""
    where = f"the gateway's HTTP server cannot listen on {host}:{port}"
    if error.errno == errno.EADDRINUSE:
        return (
            f"{where}: the port is in use (another Herald gateway, or another program); set "
            f"gateway.http_port to a free port (`herald config set gateway.http_port {port + 1}`, or "
            "`herald gateway run --http-port PORT` for this run), or stop what uses it."
        )
    if error.errno == errno.EACCES:
        return f"{where}: ports below 1024 need privileges; set gateway.http_port to 1024 or above."
    if error.errno == errno.EADDRNOTAVAIL or isinstance(error, socket.gaierror):
        return (
            f"{where}: {host} is not an address of this machine ({error.strerror or error}); set "
            "gateway.http_host (127.0.0.1 for this machine only, 0.0.0.0 for every interface)."
        )
    return f"{where} ({error.strerror or error}); check gateway.http_host and gateway.http_port."


class ClusterReport(Protocol):
    """A cluster member (``gateway.cluster.member``): its name, role, leases and queue lag."""

    def report(self) -> dict[str, object]: ...


class HttpServer:
    """Serves on ``host:port`` from ``start`` until ``stop``; ``port`` 0 picks a free one (see ``url``)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        adapters: Sequence[Adapter],
        facts: GatewayFacts,
        metrics: Exposition,
        checks: Sequence[ReadinessCheck] = (),
        cluster: ClusterReport | None = None,
    ) -> None:
        """``checks``: more things to be ready for, such as a cluster process's Redis; ``cluster``: this
        process as a cluster member, shown in ``/readyz``."""
        self.host = host
        self.port = port
        self.adapters = adapters
        self.facts = facts
        self.metrics = metrics
        self.checks = checks
        self.cluster = cluster
        self._runner: web.AppRunner | None = None
        self._mounted: dict[str, web.Application] = {}
        self._drains: list[Callable[[float], Awaitable[bool]]] = []
        self._socket: socket.socket | None = None
        self.url = ""

    @property
    def mounted(self) -> Mapping[str, web.Application]:
        """The applications mounted, by prefix."""
        return self._mounted

    def mount(
        self, prefix: str, app: web.Application, *, drain: Callable[[float], Awaitable[bool]] | None = None
    ) -> None:
        """Serve ``app`` under ``prefix`` (``/console``: ``/console/...``; ``/console`` itself redirects
        there); before :meth:`start`. ``drain``: how the application finishes its running requests at
        shutdown (:meth:`drain`)."""
        self._mounted[prefix] = app
        if drain is not None:
            self._drains.append(drain)

    async def drain(self, seconds: float) -> bool:
        """Let the mounted applications finish their running requests within ``seconds`` (taking no new
        ones); True when every one finished."""
        finished = await asyncio.gather(*(drain(seconds) for drain in self._drains))
        return all(finished)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_WEBHOOK_BODY)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        for adapter in self.adapters:
            if adapter.webhook_path:
                app.router.add_post(adapter.webhook_path, self._webhook(adapter))
                app.router.add_get(adapter.webhook_path, self._webhook_check(adapter))
        for prefix, mounted in self._mounted.items():
            app.router.add_get(prefix, _redirect(f"{prefix}/"))
            app.add_subapp(prefix, mounted)
        return app

    def reserve(self) -> None:
        """Bind the address now, serve it from :meth:`start`: a gateway whose port is taken (a second one
        started by mistake) stops before any platform hears of it. Raises ``CommandFailed`` naming the
        address and the setting."""
        try:
            address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
            listening = socket.socket(address[0], address[1], address[2])
            try:
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listening.bind(address[4])
                listening.listen(128)
            except OSError:
                listening.close()
                raise
        except OSError as error:
            raise CommandFailed(cannot_listen(self.host, self.port, error), EXIT_UNUSABLE) from None
        listening.setblocking(False)
        self._socket = listening

    async def start(self) -> None:
        if self._socket is None:
            self.reserve()
        assert self._socket is not None
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket).start()
        bound = self._socket.getsockname()[1]
        self.url = f"http://{self.host}:{bound}"
        log.info("HTTP server at %s (/healthz, /readyz, /metrics%s)", self.url,
                 "".join(f", {prefix}" for prefix in self._mounted))  # fmt: skip

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readiness(self) -> dict[str, object]:
        problems: list[str] = []
        for adapter in self.adapters:
            status = adapter.status()
            if not status.connected:
                problems.append(
                    f"{adapter.platform}: not connected{': ' + status.detail if status.detail else ''}"
                )
        try:
            async with asyncio.timeout(READY_PROBE_SECONDS):  # a database that hangs is not ready either
                await self.facts.remember("ready_probe", str(time.time()))  # the database takes writes
        except TimeoutError:
            problems.append(f"database: no answer within {READY_PROBE_SECONDS:.0f}s")
        except Exception as error:  # any failure means "not ready"; say which
            problems.append(f"database: {type(error).__name__}: {error}")
        for check in self.checks:
            try:
                async with asyncio.timeout(READY_PROBE_SECONDS):
                    await check.probe()
            except TimeoutError:
                problems.append(f"{check.name}: no answer within {READY_PROBE_SECONDS:.0f}s")
            except Exception as error:
                problems.append(f"{check.name}: {error}")
        report: dict[str, object] = {"ready": not problems, "problems": problems}
        if self.cluster is not None:
            report["cluster"] = self.cluster.report()
        return report

    async def _readyz(self, request: web.Request) -> web.Response:
        report = await self.readiness()
        return web.json_response(report, status=200 if report["ready"] else 503, dumps=json.dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    def _webhook(self, adapter: Adapter) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            reply = await adapter.receive_webhook(body, request.headers)
            return web.Response(status=reply.status, body=reply.body, content_type=reply.content_type)

        return handle

    def _webhook_check(self, adapter: Adapter) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            reply = await adapter.verify_webhook(dict(request.query))
            return web.Response(status=reply.status, body=reply.body, content_type=reply.content_type)

        return handle


def _redirect(location: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        raise web.HTTPFound(location)

    return handle
