"""Serving: :class:`FakeMatrix`, the client-server API of one homeserver over aiohttp, for the bot.

The routes are those Herald's adapter (through mautrix) calls: ``versions``, ``whoami``, ``profile``,
``sync`` (a long poll, woken at once by a new event), ``send``, ``redact``, ``typing``, ``join``,
``leave``, ``joined_members``, ``event``, ``messages``, account data, and the media repository
(upload; authenticated and legacy download). Errors are Matrix's JSON (``errcode``, ``error``); a
fault set with :meth:`FakeMatrix.fail_next` answers 429 ``M_LIMIT_EXCEEDED`` with ``retry_after_ms``;
one set with :meth:`FakeMatrix.lose_next_answer` makes the event and answers a proxy's 504. A send repeats no
event for a transaction id it has seen (see :meth:`MatrixState.bot_send`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

from aiohttp import web

from tests.fakes.waiting import WAIT_TIMEOUT, Waiter
from tests.threaded import serve_in_thread

from .state import BOT, BOT_TOKEN, SERVER, Call, Fault, MatrixState

SHUTDOWN_TIMEOUT = 2.0
CLIENT = "/_matrix/client/v3"


def _error(status: int, errcode: str, error: str, **extra: Any) -> web.Response:
    return web.json_response({"errcode": errcode, "error": error, **extra}, status=status)


class FakeMatrix(MatrixState):
    """An offline homeserver for one bot (``BOT``, token ``BOT_TOKEN``), driven by the real mautrix.

    ``async with fake.serve() as url`` (the homeserver URL), or ``with fake.serve_in_thread() as url``
    for a gateway in another process. People: :meth:`add_user`, :meth:`direct_room`,
    :meth:`create_room`, :meth:`message`, :meth:`invite`, :meth:`turn_on_encryption`,
    :meth:`redeliver`. Faults: :meth:`fail_next`, :meth:`lose_next_answer`. Observe: ``calls``,
    :meth:`bot_events`, :meth:`wait_for`.
    """

    token = BOT_TOKEN

    def __init__(self) -> None:
        super().__init__()
        self._waiter = Waiter(self.lock, self.describe)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._closing = False
        self.url = ""
        self.on_change = self._changed

    # --- serving ---------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._record])
        add = app.router.add_route
        add("GET", "/_matrix/client/versions", self._versions)
        add("GET", f"{CLIENT}/account/whoami", self._whoami)
        add("GET", f"{CLIENT}/profile/{{user}}/displayname", self._displayname)
        add("GET", f"{CLIENT}/sync", self._sync)
        add("PUT", f"{CLIENT}/rooms/{{room}}/send/{{kind}}/{{txn}}", self._send)
        add("PUT", f"{CLIENT}/rooms/{{room}}/redact/{{event}}/{{txn}}", self._redact)
        add("PUT", f"{CLIENT}/rooms/{{room}}/typing/{{user}}", self._typing)
        add("POST", f"{CLIENT}/rooms/{{room}}/join", self._join)
        add("POST", f"{CLIENT}/join/{{room}}", self._join)
        add("POST", f"{CLIENT}/rooms/{{room}}/leave", self._leave)
        add("GET", f"{CLIENT}/rooms/{{room}}/joined_members", self._joined_members)
        add("GET", f"{CLIENT}/rooms/{{room}}/event/{{event}}", self._event)
        add("GET", f"{CLIENT}/rooms/{{room}}/messages", self._messages)
        add("PUT", f"{CLIENT}/user/{{user}}/account_data/{{kind}}", self._account_data)
        add("POST", "/_matrix/media/v3/upload", self._upload)
        add("GET", "/_matrix/client/v1/media/download/{server}/{media}", self._download)
        add("GET", "/_matrix/client/v1/media/download/{server}/{media}/{name}", self._download)
        add("GET", "/_matrix/media/v3/download/{server}/{media}", self._download)
        add("*", "/{tail:.*}", self._unknown)
        return app

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        if self._loop is not None:
            raise RuntimeError("this FakeMatrix is already serving")
        runner = web.AppRunner(
            self._app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT, handler_cancellation=True
        )
        await runner.setup()
        self._closing = False
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            self.url = f"http://{host}:{runner.addresses[0][1]}"
            yield self.url
        finally:
            self._closing = True
            self._wake.set()
            await runner.cleanup()
            self._loop, self._wake = None, None

    def serve_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> AbstractContextManager[str]:
        return serve_in_thread(lambda: self.serve(host, port), "fake Matrix homeserver")

    def _changed(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(wake.set)

    # --- faults and waits --------------------------------------------------------------------------

    def fail_next(
        self, route: str, count: int = 1, *, status: int = 429, retry_after: float | None = 1.0
    ) -> None:
        """The next ``count`` calls of ``route`` ("send": a message, "edit", "upload", "sync", "join")
        fail with ``status`` (a 429 asks to wait ``retry_after`` seconds)."""
        with self.lock:
            ms = None if retry_after is None else int(retry_after * 1000)
            self.faults.append(Fault(route, status, ms, count))

    def lose_next_answer(self, route: str, count: int = 1) -> None:
        """The next ``count`` calls of ``route`` ("send", "edit") make their event, but the answer is a
        504 (the reverse proxy in front of the homeserver gave up waiting): the client cannot know it was
        sent. (Not a dropped connection: aiohttp sends a PUT again at once when the connection drops.)"""
        with self.lock:
            self.faults.append(Fault(route, 200, None, count, lost=True))

    async def wait_for(self, predicate: Any, timeout: float = WAIT_TIMEOUT, what: str | None = None) -> Any:  # noqa: ASYNC109
        return await self._waiter.wait_for(predicate, timeout, what)

    def describe(self) -> str:
        with self.lock:
            return "last calls: " + ", ".join(f"{c.method} {c.path} {c.status}" for c in self.calls[-8:])

    def calls_to(self, method: str, fragment: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == method and fragment in c.path]

    # --- HTTP --------------------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if (
            path != "/_matrix/client/versions"
            and request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}"
        ):
            response: web.StreamResponse = _error(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
        else:
            response = await handler(request)
        with self.lock:
            self.calls.append(Call(time.monotonic(), request.method, path, response.status))
        return response

    async def _versions(self, request: web.Request) -> web.Response:
        return web.json_response({"versions": ["v1.10", "v1.11"], "unstable_features": {}})

    async def _whoami(self, request: web.Request) -> web.Response:
        return web.json_response({"user_id": BOT, "device_id": "HERALD"})

    async def _displayname(self, request: web.Request) -> web.Response:
        with self.lock:
            name = self.users.get(request.match_info["user"])
        return (
            web.json_response({"displayname": name}) if name else _error(404, "M_NOT_FOUND", "no such user")
        )

    async def _sync(self, request: web.Request) -> web.Response:
        since_text = request.query.get("since")
        since = int(since_text[1:]) if since_text else None
        timeout = int(request.query.get("timeout", "0")) / 1000
        limit, not_senders = _timeline_filter(request.query.get("filter"))
        with self.lock:
            fault = self.take_fault("sync")
            if fault is not None:
                return self._fault(fault)
            if since is not None:
                self.confirmed = max(self.confirmed, since)
                self.open_syncs += 1
        try:
            deadline = time.monotonic() + timeout
            while True:
                assert self._wake is not None
                self._wake.clear()
                with self.lock:
                    answer = self.sync(since, limit, not_senders)
                    news = since is None or bool(answer["rooms"]["join"] or answer["rooms"]["invite"])
                if news or self._closing or time.monotonic() >= deadline:
                    return web.json_response(answer)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        await self._wake.wait()
        finally:
            if since is not None:
                with self.lock:
                    self.open_syncs -= 1

    def _fault(self, fault: Fault) -> web.Response:
        extra = {"retry_after_ms": fault.retry_after_ms} if fault.retry_after_ms is not None else {}
        if fault.status == 429:
            return _error(429, "M_LIMIT_EXCEEDED", "Too Many Requests", **extra)
        return _error(fault.status, "M_UNKNOWN", "Internal server error")

    def _room(self, request: web.Request) -> Any:
        return self.rooms.get(request.match_info["room"])

    async def _send(self, request: web.Request) -> web.Response:
        content = await request.json()
        edit = (content.get("m.relates_to") or {}).get("rel_type") == "m.replace"
        with self.lock:
            room = self._room(request)
            if room is None or room.members.get(BOT) != "join":
                return _error(403, "M_FORBIDDEN", "User not in room")
            if not edit:
                self.send_times.append(time.monotonic())
            fault = self.take_fault("edit" if edit else "send")
            if fault is not None and not fault.lost:
                return self._fault(fault)
            if edit and "m.new_content" not in content:
                return _error(400, "M_BAD_JSON", "an edit needs m.new_content")
            token = request.headers["Authorization"].removeprefix("Bearer ")
            event_id = self.bot_send(
                room.room_id, request.match_info["kind"], content, request.match_info["txn"], token
            )
        self._changed()
        if fault is not None:  # lost: made, but the proxy in front answers instead
            return _error(504, "M_UNKNOWN", "Gateway Timeout")
        return web.json_response({"event_id": event_id})

    async def _redact(self, request: web.Request) -> web.Response:
        with self.lock:
            room = self._room(request)
            if room is None or not self.redact(room.room_id, request.match_info["event"]):
                return _error(404, "M_NOT_FOUND", "Event not found")
        return web.json_response({"event_id": f"$redaction{request.match_info['txn']}"})

    async def _typing(self, request: web.Request) -> web.Response:
        with self.lock:
            self.typing.append(request.match_info["room"])
        return web.json_response({})

    async def _join(self, request: web.Request) -> web.Response:
        with self.lock:
            fault = self.take_fault("join")
            if fault is not None:
                return _error(fault.status, "M_FORBIDDEN", "You are not invited to this room.")
            room = self._room(request)
            if room is None or room.members.get(BOT) not in ("invite", "join"):
                return _error(403, "M_FORBIDDEN", "You are not invited to this room.")
            self.bot_join(room.room_id)
        self._changed()
        return web.json_response({"room_id": request.match_info["room"]})

    async def _leave(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        with self.lock:
            room = self._room(request)
            if room is None:
                return _error(404, "M_NOT_FOUND", "Unknown room")
            self.bot_leave(room.room_id, str(body.get("reason", "")))
        self._changed()
        return web.json_response({})

    async def _joined_members(self, request: web.Request) -> web.Response:
        with self.lock:
            room = self._room(request)
            if room is None or room.members.get(BOT) != "join":
                return _error(403, "M_FORBIDDEN", "User not in room")
            joined = {
                user: {"display_name": self.users.get(user, user), "avatar_url": None}
                for user, membership in room.members.items()
                if membership == "join"
            }
        return web.json_response({"joined": joined})

    async def _event(self, request: web.Request) -> web.Response:
        with self.lock:
            room = self._room(request)
            found = [e for e in (room.events if room else []) if e["event_id"] == request.match_info["event"]]
        return web.json_response(found[0]) if found else _error(404, "M_NOT_FOUND", "Event not found")

    async def _messages(self, request: web.Request) -> web.Response:
        start = int(request.query["from"][1:])
        stop = int(request.query.get("to", "s0")[1:])
        with self.lock:
            answer = self.messages_between(
                request.match_info["room"], start, stop, int(request.query.get("limit", "10"))
            )
        return web.json_response(answer)

    async def _account_data(self, request: web.Request) -> web.Response:
        if request.match_info["user"] != BOT:
            return _error(403, "M_FORBIDDEN", "Cannot add account data for other users.")
        body = await request.json()
        with self.lock:
            self.account_data[request.match_info["kind"]] = body
        return web.json_response({})

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        with self.lock:
            fault = self.take_fault("upload")
            if fault is not None:
                return self._fault(fault)
            media = f"media{len(self.media) + 1}"
            name = request.query.get("filename", "file")
            self.media[media] = (name, request.headers.get("Content-Type", "application/octet-stream"), data)
        return web.json_response({"content_uri": f"mxc://{SERVER}/{media}"})

    async def _download(self, request: web.Request) -> web.Response:
        with self.lock:
            found = (
                self.media.get(request.match_info["media"])
                if request.match_info["server"] == SERVER
                else None
            )
        if found is None:
            return _error(404, "M_NOT_FOUND", "Not found")
        _, mime, data = found
        return web.Response(body=data, content_type=mime.split(";")[0])

    async def _unknown(self, request: web.Request) -> web.Response:
        return _error(404, "M_UNRECOGNIZED", f"Unrecognized request {request.method} {request.path}")

    # --- people -------------------------------------------------------------------------------------

    def upload(self, data: bytes, mime: str, name: str) -> str:
        """A person's upload: its mxc:// address."""
        with self.lock:
            media = f"media{len(self.media) + 1}"
            self.media[media] = (name, mime, data)
        return f"mxc://{SERVER}/{media}"

    def uploaded(self, mxc: str) -> tuple[str, str, bytes] | None:
        with self.lock:
            return self.media.get(mxc.rsplit("/", 1)[-1])


def _timeline_filter(filter_text: str | None) -> tuple[int, frozenset[str]]:
    """An inline filter's timeline ``limit`` (default 20) and ``not_senders``."""
    try:
        timeline = json.loads(filter_text or "{}")["room"]["timeline"]
    except (ValueError, KeyError, TypeError):
        return 20, frozenset()
    limit = timeline.get("limit") if isinstance(timeline, dict) else None
    senders = timeline.get("not_senders") if isinstance(timeline, dict) else None
    return (
        limit if isinstance(limit, int) and limit > 0 else 20,
        frozenset(senders) if isinstance(senders, list) else frozenset(),
    )
