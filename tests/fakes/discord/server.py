"""Serving: :class:`FakeDiscord` over aiohttp, on the caller's loop or in a thread.

One port serves the REST API under ``/api/v10``, the gateway websocket at ``/gateway`` (and
``/resume``, READY's ``resume_gateway_url``) and attachment downloads under ``/attachments``. The
HTTP layer parses the body (JSON, or multipart with ``payload_json`` + ``files[n]``), records the
call, applies scripted faults and writes what the route handlers decided; state changes happen in
the handlers under the state lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any, NamedTuple, TypeVar

from aiohttp import web

from tests.fakes.waiting import WAIT_TIMEOUT, Waiter
from tests.threaded import serve_in_thread

from . import interactions, rest
from .gateway import Gateway
from .inject import Inject
from .messages import Upload
from .records import Fault, RecordedCall
from .rest import RestRequest, Route
from .wire import DEFAULT_FAULT_CODES, ApiError, json_response, rate_limit_headers

T = TypeVar("T")
SHUTDOWN_TIMEOUT = 2.0
ROUTES: list[tuple[Route, re.Pattern[str]]] = [(r, r.regex) for r in rest.ROUTES + interactions.ROUTES]
SUCCESS_LIMIT = 50  # X-RateLimit-Limit on ordinary answers (never exhausted: no pre-emptive waits)


class DiscordUrls(NamedTuple):
    rest: str  # http://127.0.0.1:PORT/api/v10, for discord.http.Route.BASE
    gateway: str  # ws://127.0.0.1:PORT/gateway, for DiscordWebSocket.DEFAULT_GATEWAY


class FakeDiscord(Inject):
    """An offline Discord (REST + gateway) for one bot application, driven by the real discord.py.

    ``async with fake.serve() as urls`` on the running loop (or ``with fake.serve_in_thread()``),
    then ``with fake.patch_discord():`` to point discord.py at it. The world: ``bot_id``,
    ``application_id``, ``token``, a guild ``guild_id`` with text channel ``channel_id``;
    :meth:`add_guild`, :meth:`add_text_channel`, :meth:`add_thread`, :meth:`add_user`.
    Inject: :meth:`dm_message`, :meth:`guild_message`, :meth:`interaction`, :meth:`replay`,
    :meth:`edit_user_message`, :meth:`delete_user_message`, :meth:`dispatch`. Gateway faults:
    :meth:`force_reconnect`, :meth:`invalidate_sessions`, ``enabled_privileged_intents``,
    ``ack_heartbeats``. REST faults: :meth:`fail_next`, :meth:`fail_network_next`,
    :meth:`forbid_channel`. Observe: ``calls``, :meth:`messages`, ``deleted``, :meth:`typing`,
    ``command_syncs``, :meth:`interaction_responses`, ``identify_payloads``, ``connections``,
    :meth:`live_shards`, :meth:`shard_overlaps`, :meth:`wait_for`. Sharding: ``recommended_shards``
    is what ``GET /gateway/bot`` answers; a sharded session gets its guilds' events only (and DMs on
    shard 0), as on Discord.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiter = Waiter(self.lock, self.describe)
        self._gateway = Gateway(self)
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- serving -----------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self._gateway.handle)
        app.router.add_get("/resume", self._gateway.handle)
        app.router.add_route("*", r"/api/v{version:\d+}/{tail:.*}", self._rest)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", self._download)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[DiscordUrls]:
        """Serve on the current event loop; yields :class:`DiscordUrls` (REST base, gateway URL)."""
        if self._loop is not None:
            raise RuntimeError("this FakeDiscord is already serving")
        runner = web.AppRunner(
            self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT, handler_cancellation=True
        )
        await runner.setup()
        self._loop = asyncio.get_running_loop()
        self._gateway.accepting = True
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
            root = f"{host}:{runner.addresses[0][1]}"
            with self.lock:
                self.base_url = f"http://{root}"
                self.rest_url = f"http://{root}/api/v10"
                self.gateway_url = f"ws://{root}/gateway"
                self._gateway.resume_url = f"ws://{root}/resume"
            yield DiscordUrls(self.rest_url, self.gateway_url)
        finally:
            # Stop listening first, so a client reconnecting after the close finds nobody there.
            self._gateway.accepting = False
            with contextlib.suppress(RuntimeError):  # the site never started
                await site.stop()
            await self._gateway.close_all()
            await runner.cleanup()
            self._loop = None

    def serve_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> AbstractContextManager[DiscordUrls]:
        """Serve from a daemon thread with its own loop; yields :class:`DiscordUrls`."""
        return serve_in_thread(lambda: self.serve(host, port), "fake Discord server")

    @contextmanager
    def patch_discord(self) -> Iterator[DiscordUrls]:
        """Point discord.py at this fake (``Route.BASE``, ``DiscordWebSocket.DEFAULT_GATEWAY``)
        and restore both on exit. Serve first: the URLs carry the bound port."""
        import discord.gateway
        import discord.http
        import yarl

        if not self.rest_url:
            raise RuntimeError("serve the fake before patching discord.py")
        route, socket = discord.http.Route, discord.gateway.DiscordWebSocket
        old_base, old_gateway = route.BASE, socket.DEFAULT_GATEWAY
        route.BASE = self.rest_url
        socket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        try:
            yield DiscordUrls(self.rest_url, self.gateway_url)
        finally:
            route.BASE, socket.DEFAULT_GATEWAY = old_base, old_gateway

    # --- gateway controls --------------------------------------------------------------------------

    def force_reconnect(self, resume: bool = True, *, code: int | None = None) -> int:
        """Make every connected client reconnect; returns how many connections were affected.

        ``resume=True``: op 7 RECONNECT (or, with ``code``, a close with that code, e.g. 4000);
        the session stays resumable, events dispatched meanwhile are replayed after RESUME.
        ``resume=False``: the session is invalidated and op 9 INVALID_SESSION (or the close
        ``code``) is sent; discord.py identifies again (a new READY: ``on_ready`` fires again)
        and events dispatched in between are lost, as on Discord.
        """
        return self._gateway.force_reconnect(resume=resume, code=code)

    def invalidate_sessions(self) -> None:
        """Every session becomes unresumable: a RESUME now gets op 9 (then a fresh IDENTIFY)."""
        self._gateway.invalidate_sessions()

    @property
    def ack_heartbeats(self) -> bool:
        return self._gateway.ack_heartbeats

    @ack_heartbeats.setter
    def ack_heartbeats(self, value: bool) -> None:
        self._gateway.ack_heartbeats = value

    # --- HTTP --------------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        path, method = "/" + request.match_info["tail"], request.method
        parse_error: str | None = None
        body: Any = None
        uploads: list[Upload] = []
        try:
            body, uploads = await _read_body(request)
        except ValueError as exc:
            parse_error = str(exc)
        route, params, allowed = _match(method, path)
        call = RecordedCall(
            method,
            path,
            route.template if route else None,
            copy.deepcopy(body),
            dict(request.query),
            time.monotonic(),
            files={u.filename: u.data for u in uploads},
        )
        self.record_call(call)
        fault = self.take_fault(method, path) if route is not None else None
        if fault is not None and fault.network:
            with self.lock:
                if fault.takes_effect:  # carried out; the answer is lost on the way back
                    self._answer(request, route, params, allowed, body, uploads, parse_error, None)
                call.status = 0
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client
        with self.lock:
            status, out, headers = self._answer(
                request, route, params, allowed, body, uploads, parse_error, fault
            )
            call.status, call.response = status, copy.deepcopy(out)
        return json_response(status, out, headers)

    def _answer(
        self,
        request: web.Request,
        route: Route | None,
        params: dict[str, str],
        allowed: list[str],
        body: Any,
        uploads: list[Upload],
        parse_error: str | None,
        fault: Fault | None,
    ) -> tuple[int, Any, dict[str, str]]:
        """Status, JSON body and headers for one REST request (lock held)."""
        if route is None:
            if allowed:
                return 405, ApiError(405, 0).body(), {"Allow": ", ".join(allowed)}
            return 404, ApiError(404, 0).body(), {}
        if route.auth and request.headers.get("Authorization") != f"Bot {self.token}":
            return 401, ApiError(401, 0).body(), {}
        bucket = hashlib.sha1(f"{route.method} {route.template}".encode()).hexdigest()[:32]
        if fault is not None:
            return _fault_answer(fault, bucket)
        if parse_error is not None:
            return 400, ApiError(400, 50109, "The request body contains invalid JSON.").body(), {}
        req = RestRequest(
            request.method, "/" + request.match_info["tail"], params, dict(request.query), body, uploads
        )
        try:
            status, out = route.handler(self, req)
        except ApiError as exc:
            status, out = exc.status, exc.body()
        headers = rate_limit_headers(
            bucket, limit=SUCCESS_LIMIT, remaining=SUCCESS_LIMIT - 1, reset_after=1.0, scope="user"
        )
        return status, out, headers

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """Attachment bytes (discord.py's ``Attachment.read()`` GETs the ``url``)."""
        with self.lock:
            wanted = request.match_info["attachment_id"]
            for msg in self.messages_by_id.values():
                for attachment_id, file in msg.attachments:
                    if str(attachment_id) == wanted and file.filename == request.match_info["filename"]:
                        kind = file.content_type or "application/octet-stream"
                        return web.Response(body=file.data, headers={"Content-Type": kind})
        return json_response(404, ApiError(404, 0).body())

    async def _not_found(self, request: web.Request) -> web.StreamResponse:
        return json_response(404, ApiError(404, 0).body())

    # --- waiting -----------------------------------------------------------------------------------

    async def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float = WAIT_TIMEOUT,  # noqa: ASYNC109 - a bounded wait is the point of this helper
        *,
        what: str | None = None,
    ) -> T:
        """Poll ``predicate`` (under the lock) until it returns something truthy; return that.

        A predicate raising LookupError/AssertionError counts as "not yet". On timeout raises
        :class:`WaitTimeout` (an AssertionError and a TimeoutError) describing recent activity.
        """
        return await self._waiter.wait_for(predicate, timeout, what)

    def wait_for_sync(
        self, predicate: Callable[[], T], timeout: float = WAIT_TIMEOUT, *, what: str | None = None
    ) -> T:
        """:meth:`wait_for` for synchronous callers (``serve_in_thread``)."""
        return self._waiter.wait_for_sync(predicate, timeout, what)

    async def wait_received(self, timeout: float = WAIT_TIMEOUT) -> None:  # noqa: ASYNC109
        """Wait until every connected client has read every event sent to it so far: each is asked for
        a heartbeat, which carries the last sequence number it read. A client handles a connection's
        events in order, so discord.py has then parsed (and dispatched) every one of them."""
        asked = self._gateway.ask_for_heartbeats()
        await self.wait_for(
            lambda: all(self.sessions[session].heard >= seq for session, seq in asked.items()),
            timeout,
            what="a heartbeat from every client after the events sent to it",
        )

    async def wait_for_session(self, timeout: float = WAIT_TIMEOUT) -> str:  # noqa: ASYNC109
        """Wait until a client has identified (or resumed) and is connected; its session id."""
        live = await self.wait_for(self.live_sessions, timeout, what="a connected gateway session")
        return live[0]


def _match(method: str, path: str) -> tuple[Route | None, dict[str, str], list[str]]:
    """The route for ``method path`` with its parameters, or None and the methods the path allows."""
    allowed = []
    for route, regex in ROUTES:
        found = regex.fullmatch(path)
        if found is None:
            continue
        if route.method == method:
            return route, found.groupdict(), []
        allowed.append(route.method)
    return None, {}, allowed


def _fault_answer(fault: Fault, bucket: str) -> tuple[int, Any, dict[str, str]]:
    if fault.status == 429:
        body: dict[str, Any] = {
            "message": fault.message or "You are being rate limited.",
            "retry_after": fault.retry_after,
            "global": fault.global_,
        }
        scope = "global" if fault.global_ else "user"
        headers = {
            "Via": "1.1 google",
            "Retry-After": str(max(1, math.ceil(fault.retry_after))),
            **rate_limit_headers(bucket, limit=5, remaining=0, reset_after=fault.retry_after, scope=scope),
        }
        if fault.global_:
            body["code"] = 0
            headers["X-RateLimit-Global"] = "true"
        return 429, body, headers
    code = fault.code if fault.code is not None else DEFAULT_FAULT_CODES.get(fault.status, 0)
    return fault.status, ApiError(fault.status, code, fault.message).body(), {}


async def _read_body(request: web.Request) -> tuple[Any, list[Upload]]:
    """The JSON body, or a multipart body's ``payload_json`` and its ``files[n]`` parts."""
    if request.content_type.startswith("multipart/"):
        form = await request.post()
        payload: Any = None
        uploads = []
        for key, value in form.items():
            if isinstance(value, web.FileField):
                uploads.append(Upload(key, value.filename, value.content_type, value.file.read()))
            elif key == "payload_json":
                payload = json.loads(str(value))
        return payload, uploads
    raw = await request.read()
    if not raw.strip():
        return None, []
    return json.loads(raw), []
