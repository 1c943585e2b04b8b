"""The fake Slack: one workspace, one app, people, channels and what the bot did there.

People act through :meth:`FakeSlack.post` (a message in a channel or DM, in a thread, with files),
:meth:`FakeSlack.slash_command`, :meth:`FakeSlack.open_home`. Each becomes an event pushed to the
live Socket Mode connection (kept until acknowledged, sent again after a reconnection, as Slack does)
or, with :meth:`FakeSlack.events_to`, POSTed signed to an Events API URL (a slash command as a form).
:meth:`FakeSlack.silence` makes the socket stop answering pings and swallow events, like a connection
that died without a close frame: what is sent meanwhile is lost unless read back with
``conversations.history``. Faults: :meth:`FakeSlack.fail_next` (a 429 with ``Retry-After``),
:meth:`FakeSlack.hold` (a method left unanswered until released), :meth:`FakeSlack.drop` (sockets closed,
reconnections refused until :meth:`FakeSlack.accept_reconnects`). Thread safe: a test may drive a fake
served from another thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

import aiohttp
from aiohttp import WSMsgType, web

from tests.fakes.waiting import WAIT_TIMEOUT, Waiter
from tests.threaded import serve_in_thread

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
TEAM = "T0FAKE"
BOT_USER = "UBOT"
BOT_ID = "BBOT"
FORM = "application/x-www-form-urlencoded"
SIGN_IN_PAGE = b"<!DOCTYPE html><html><body>Sign in to Slack</body></html>"


@dataclass
class SlackMessage:
    """A message in the fake's history (the bot's, a person's, or a private reply to a command)."""

    ts: str
    channel: str
    user: str
    text: str
    thread_ts: str | None = None
    bot: bool = False
    versions: list[str] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False
    ephemeral_to: str | None = None
    reply_broadcast: bool = False
    made: float = field(default_factory=time.monotonic)  # when the fake took it (benchmarks time answers)

    def wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": "message", "ts": self.ts, "user": self.user, "text": self.text}
        if self.bot:
            wire["bot_id"] = BOT_ID
        if self.thread_ts:
            wire["thread_ts"] = self.thread_ts
        if self.files:
            wire["subtype"] = "file_share"
            wire["files"] = [{k: v for k, v in f.items() if k != "data"} for f in self.files]
        return wire


@dataclass
class Call:
    method: str
    time: float
    args: dict[str, Any]
    status: int


class FakeSlack:
    """See the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.waiter = Waiter(self.lock, self.describe)
        self.users: dict[str, str] = {BOT_USER: "herald"}  # id -> name
        self.channels: dict[str, dict[str, Any]] = {}
        self.messages: list[SlackMessage] = []
        self.calls: list[Call] = []
        self.views: dict[str, dict[str, Any]] = {}  # user -> the App Home view published for them
        self.uploads: dict[str, dict[str, Any]] = {}
        self.root = ""
        self.events_url: str | None = None
        self.event_posts: list[tuple[int, int]] = []  # (retry number, status) of each Events API POST
        self._failures: dict[str, list[float]] = {}
        self._gates: dict[str, asyncio.Event] = {}  # held methods
        self._last_ts = 0  # microseconds: every message's ts is the time it was made, and unique
        self._ids = itertools.count(1)
        self._sockets: list[_Socket] = []
        self._unacked: dict[str, dict[str, Any]] = {}  # envelope id -> envelope
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self.connections = 0  # websocket connections opened so far
        self.refusing = False  # apps.connections.open answers 503 (see drop)
        self.add_channel("CGENERAL", "general")

    # --- the world ------------------------------------------------------------------------------

    def add_user(self, user: str, name: str) -> None:
        with self.lock:
            self.users[user] = name

    def add_channel(self, channel: str, name: str) -> None:
        with self.lock:
            self.channels[channel] = {"id": channel, "name": name, "is_channel": True, "is_member": True}

    def dm_channel(self, user: str) -> str:
        channel = f"D{user}"
        with self.lock:
            self.channels.setdefault(channel, {"id": channel, "is_im": True, "user": user, "is_member": True})
        return channel

    def _next_ts(self) -> str:
        """Slack's ``ts``: the time in seconds with six decimals, unique in the workspace."""
        with self.lock:
            self._last_ts = max(int(time.time() * 1_000_000), self._last_ts + 1)
            micros = self._last_ts
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    # --- what people do -------------------------------------------------------------------------

    def post(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        files: list[tuple[str, bytes, str]] | None = None,
    ) -> dict[str, Any]:
        """``user`` writes in ``channel``; returns the message event (sent as ``message``, and also as
        ``app_mention`` when it mentions the bot in a channel, as Slack does)."""
        with self.lock:
            message = SlackMessage(self._next_ts(), channel, user, text, thread_ts)
            for name, data, mime in files or ():
                file_id = f"F{next(self._ids):06d}"
                message.files.append({
                    "id": file_id, "name": name, "mimetype": mime, "size": len(data), "data": data,
                    "url_private_download": f"{self.root}/files/{file_id}/{name}",
                })  # fmt: skip
            self.messages.append(message)
            event = message.wire()
            event["channel"] = channel
            event["channel_type"] = "im" if channel.startswith("D") else "channel"
            event["team"] = TEAM
        self._deliver(event)
        if f"<@{BOT_USER}>" in text and not channel.startswith("D"):
            self._deliver({**event, "type": "app_mention"})
        return event

    def slash_command(self, user: str, channel: str, command: str, text: str) -> dict[str, Any]:
        trigger = f"{next(self._ids)}.trigger"
        payload = {
            "command": command, "text": text, "user_id": user, "user_name": self.users.get(user, user),
            "channel_id": channel, "team_id": TEAM, "trigger_id": trigger,
            "response_url": f"{self.root}/respond/{channel}/{user}/{trigger}",
        }  # fmt: skip
        if self.events_url is not None:  # the app's Request URL: a signed form POST, as Slack sends it
            self._on_loop(self.post_signed(urlencode(payload).encode(), content_type=FORM))
        else:
            self._push({"type": "slash_commands", "payload": payload, "accepts_response_payload": True})
        return payload

    def open_home(self, user: str) -> None:
        self._deliver({"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": "home"})

    def redeliver(self, event: dict[str, Any]) -> None:
        """Slack sends the event again (a retry after a missing acknowledgement)."""
        self._deliver(event, retry=1)

    def _deliver(self, event: dict[str, Any], *, retry: int = 0) -> None:
        payload = {
            "type": "event_callback", "team_id": TEAM, "api_app_id": "AFAKE", "event": event,
            "event_id": f"Ev{event.get('ts', next(self._ids))}{event['type']}",
            "event_time": int(time.time()),
        }  # fmt: skip
        if self.events_url is not None:
            self._on_loop(self._post_event(payload, retry))
            return
        self._push({"type": "events_api", "payload": payload, "retry_attempt": retry, "retry_reason": ""})

    def _push(self, envelope: dict[str, Any]) -> None:
        envelope = {**envelope, "envelope_id": f"env-{next(self._ids)}"}
        with self.lock:
            live = [s for s in self._sockets if not s.silent]
            if not live:
                return  # nobody listening (or a dead socket): Slack's event is lost
            self._unacked[envelope["envelope_id"]] = envelope
        self._on_loop(live[-1].send(envelope))

    # --- Events API -----------------------------------------------------------------------------

    def events_to(self, url: str | None) -> None:
        """POST events to ``url`` (the gateway's /slack/events) instead of the socket."""
        self.events_url = url

    async def post_signed(
        self, body: bytes, *, retry: int = 0, secret: str = SIGNING_SECRET, age: float = 0,
        content_type: str = "application/json",
    ) -> int:  # fmt: skip
        """POST ``body`` to the Events API URL signed as Slack signs (``v0=`` HMAC-SHA256 of
        ``v0:{timestamp}:{body}``), ``age`` seconds old; returns the status."""
        assert self.events_url is not None and self._session is not None
        timestamp = str(int(time.time() - age))
        digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
        headers = {
            "X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": content_type,
        }  # fmt: skip
        if retry:
            headers["X-Slack-Retry-Num"], headers["X-Slack-Retry-Reason"] = str(retry), "http_timeout"
        async with self._session.post(self.events_url, data=body, headers=headers) as response:
            await response.read()
            with self.lock:
                self.event_posts.append((retry, response.status))
            return response.status

    async def _post_event(self, payload: dict[str, Any], retry: int) -> None:
        await self.post_signed(json.dumps(payload).encode(), retry=retry)

    # --- faults ---------------------------------------------------------------------------------

    def fail_next(self, method: str, count: int, retry_after: float) -> None:
        with self.lock:
            self._failures.setdefault(method, []).extend([retry_after] * count)

    def hold(self, method: str) -> None:
        """Calls of ``method`` wait, unanswered, until :meth:`release` (a slow Slack, on purpose)."""
        with self.lock:
            self._gates[method] = asyncio.Event()

    def release(self, method: str) -> None:
        with self.lock:
            gate, loop = self._gates.pop(method, None), self._loop
        if gate is not None and loop is not None:
            loop.call_soon_threadsafe(gate.set)

    def drop(self, *, refuse_reconnects: bool) -> None:
        """Close every live socket; with ``refuse_reconnects``, ``apps.connections.open`` answers 503
        (Slack unreachable for Socket Mode) until :meth:`accept_reconnects`."""
        with self.lock:
            self.refusing = refuse_reconnects
            sockets = list(self._sockets)
        for socket in sockets:
            self._on_loop(socket.ws.close())

    def accept_reconnects(self) -> None:
        with self.lock:
            self.refusing = False

    def silence(self) -> None:
        """The live socket stops answering pings and swallows events (no close frame)."""
        with self.lock:
            for socket in self._sockets:
                socket.silent = True

    # --- what the bot did -----------------------------------------------------------------------

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[SlackMessage]:
        with self.lock:
            return [
                m for m in self.messages
                if m.bot and m.channel == channel and not m.deleted and m.thread_ts == thread_ts
            ]  # fmt: skip

    def calls_to(self, method: str) -> list[Call]:
        with self.lock:
            return [call for call in self.calls if call.method == method]

    def live(self) -> bool:
        with self.lock:
            return any(not s.silent and not s.ws.closed for s in self._sockets)

    def unacked(self) -> int:
        with self.lock:
            return len(self._unacked)

    def describe(self) -> str:
        with self.lock:
            recent = [f"{c.method}={c.status}" for c in self.calls[-10:]]
            return f"sockets={len(self._sockets)} unacked={len(self._unacked)} calls={recent}"

    async def wait_for(self, predicate: Any, timeout: float = WAIT_TIMEOUT, what: str | None = None) -> Any:  # noqa: ASYNC109
        return await self.waiter.wait_for(predicate, timeout, what)

    # --- serving --------------------------------------------------------------------------------

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on this loop; yields the Web API base URL (``http://HOST:PORT/api/``)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/socket", self._websocket)
        app.router.add_get("/files/{file_id}/{name}", self._file)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/respond/{channel}/{user}/{trigger}", self._respond)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._loop = asyncio.get_running_loop()
        self._session = aiohttp.ClientSession()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            self.root = f"http://{host}:{runner.addresses[0][1]}"
            yield f"{self.root}/api/"
        finally:
            for socket in list(self._sockets):
                await socket.ws.close()
            await runner.cleanup()
            await self._session.close()
            self._loop = None

    def serve_in_thread(self) -> AbstractContextManager[str]:
        return serve_in_thread(self.serve, "fake Slack server")

    def _on_loop(self, coro: Any) -> None:
        loop = self._loop
        if loop is None:
            coro.close()
            return
        loop.call_soon_threadsafe(lambda: loop.create_task(coro))

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        socket = _Socket(ws)
        with self.lock:
            self._sockets.append(socket)
            self.connections += 1
            pending = list(self._unacked.values())
        await socket.send({"type": "hello", "num_connections": 1})
        for envelope in pending:  # unacknowledged envelopes come again on the new connection
            await socket.send({**envelope, "retry_attempt": envelope.get("retry_attempt", 0) + 1})
        try:
            async for message in ws:
                if message.type == WSMsgType.PING and not socket.silent:
                    await ws.pong(message.data)
                elif message.type == WSMsgType.TEXT and not socket.silent:
                    ack = json.loads(message.data)
                    with self.lock:
                        self._unacked.pop(str(ack.get("envelope_id")), None)
        finally:
            with self.lock:
                self._sockets.remove(socket)
        return ws

    async def _file(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        with self.lock:
            found = [f for m in self.messages for f in m.files if f["id"] == file_id]
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return web.Response(body=SIGN_IN_PAGE, content_type="text/html")  # as Slack does: 200
        if not found:
            return web.Response(status=404)
        return web.Response(body=found[0]["data"], content_type=found[0]["mimetype"])

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        data = await request.read()
        with self.lock:
            self.uploads.setdefault(request.match_info["file_id"], {})["data"] = data
        return web.Response(text="OK")

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        channel, user = request.match_info["channel"], request.match_info["user"]
        with self.lock:
            if body.get("replace_original"):
                mine = [m for m in self.messages if m.ephemeral_to == user and m.channel == channel]
                if mine:
                    mine[-1].text = body["text"]
                    mine[-1].versions.append(body["text"])
                    return web.json_response({"ok": True})
            ephemeral = None if body.get("response_type") == "in_channel" else user
            message = SlackMessage(
                self._next_ts(), channel, BOT_USER, body["text"], bot=True, ephemeral_to=ephemeral
            )
            message.versions.append(body["text"])
            self.messages.append(message)
        return web.json_response({"ok": True})

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        args: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.can_read_body:
            args.update({k: v[0] for k, v in parse_qs((await request.read()).decode()).items()})
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        with self.lock:
            waits = self._failures.get(method)
            retry_after = waits.pop(0) if waits else None
            refused = method == "apps.connections.open" and self.refusing
            status = 503 if refused else 429 if retry_after is not None else 200
            self.calls.append(Call(method, time.monotonic(), args, status))
            gate = self._gates.get(method)
        if gate is not None:
            await gate.wait()
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if refused:
            return web.json_response({"ok": False, "error": "service_unavailable"}, status=503)
        if retry_after is not None:
            headers = {"Retry-After": f"{retry_after:g}"}
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers=headers)
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
        with self.lock:
            answer = handler(args)
        return web.json_response({"ok": "error" not in answer, **answer})

    # --- Web API methods (under the lock) -------------------------------------------------------

    def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"user": "herald", "user_id": BOT_USER, "bot_id": BOT_ID, "team_id": TEAM, "team": "Fake"}

    def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.root.replace("http://", "ws://") + "/socket"}

    def _m_users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("user"))
        if user not in self.users:
            return {"error": "user_not_found"}
        return {"user": {"id": user, "name": self.users[user], "profile": {"display_name": self.users[user]}}}

    def _m_users_conversations(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "channels": [dict(c) for c in self.channels.values()],
            "response_metadata": {"next_cursor": ""},
        }

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel"))
        if channel not in self.channels:
            return {"error": "channel_not_found"}
        broadcast = str(args.get("reply_broadcast", "false")).lower() in ("true", "1")
        text, thread = str(args.get("text", "")), args.get("thread_ts") or None
        message = SlackMessage(
            self._next_ts(), channel, BOT_USER, text, thread, bot=True, reply_broadcast=broadcast
        )
        message.versions.append(message.text)
        self.messages.append(message)
        return {"channel": channel, "ts": message.ts, "message": message.wire()}

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        found = [m for m in self.messages if m.ts == args.get("ts") and m.channel == args.get("channel")]
        if not found or found[0].deleted:
            return {"error": "message_not_found"}
        if found[0].text != args.get("text"):
            found[0].text = str(args.get("text"))
            found[0].versions.append(found[0].text)
        return {"channel": found[0].channel, "ts": found[0].ts}

    def _m_chat_delete(self, args: dict[str, Any]) -> dict[str, Any]:
        found = [m for m in self.messages if m.ts == args.get("ts") and m.channel == args.get("channel")]
        if not found or found[0].deleted:
            return {"error": "message_not_found"}
        found[0].deleted = True
        return {"channel": found[0].channel, "ts": found[0].ts}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        oldest = float(args.get("oldest") or 0)
        top = [
            m for m in self.messages
            if m.channel == args.get("channel") and not m.deleted and m.ephemeral_to is None
            and (m.thread_ts is None or m.thread_ts == m.ts) and float(m.ts) > oldest
        ]  # fmt: skip
        wires = []
        for m in sorted(top, key=lambda m: float(m.ts), reverse=True):
            wire = m.wire()
            replies = [
                r for r in self.messages if r.thread_ts == m.ts and r.ts != m.ts and r.channel == m.channel
            ]
            if replies:
                wire["reply_count"], wire["latest_reply"] = len(replies), replies[-1].ts
            wires.append(wire)
        return {"messages": wires, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        thread, oldest = str(args.get("ts")), float(args.get("oldest") or 0)
        latest = float(args.get("latest") or "inf")
        found = [
            m for m in self.messages
            if m.channel == args.get("channel") and (m.ts == thread or m.thread_ts == thread)
            and not m.deleted and m.ephemeral_to is None and oldest < float(m.ts) < latest
        ]  # fmt: skip
        return {
            "messages": [m.wire() for m in found],
            "has_more": False,
            "response_metadata": {"next_cursor": ""},
        }

    def _m_views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        view = args.get("view")
        self.views[str(args.get("user_id"))] = json.loads(view) if isinstance(view, str) else dict(view or {})
        return {"view": {"id": "VFAKE"}}

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._ids):06d}"
        self.uploads[file_id] = {"name": str(args.get("filename")), "length": int(args.get("length", 0))}
        return {"upload_url": f"{self.root}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        listed = args.get("files")
        listed = json.loads(listed) if isinstance(listed, str) else listed
        channel = str(args.get("channel_id"))
        message = SlackMessage(
            self._next_ts(), channel, BOT_USER, "", args.get("thread_ts") or None, bot=True
        )
        for item in listed or ():
            upload = self.uploads[item["id"]]
            message.files.append({"id": item["id"], "name": upload["name"], "data": upload.get("data", b""),
                                  "mimetype": "application/octet-stream"})  # fmt: skip
        self.messages.append(message)
        return {"files": [{"id": item["id"], "title": item.get("title")} for item in listed or ()]}


@dataclass(eq=False)
class _Socket:
    ws: web.WebSocketResponse
    silent: bool = False

    async def send(self, envelope: dict[str, Any]) -> None:
        if not self.silent and not self.ws.closed:
            await self.ws.send_str(json.dumps(envelope))

