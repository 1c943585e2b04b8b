""":class:`FakeSignal`: signal-cli's HTTP daemon for one account (``BOT``), as signal-cli-jsonrpc(5) and
signal-cli(1) describe it, over aiohttp on 127.0.0.1.

- ``POST /api/v1/rpc``: JSON-RPC 2.0; the methods the adapter calls (``listContacts``, ``send`` with
  ``textStyle``, quotes, ``editTimestamp``, data-URI attachments and ``voiceNote``, ``sendTyping``,
  ``remoteDelete``, ``getAttachment``, ``updateProfile``, ``listGroups``); errors as signal-cli gives
  them (-1 a refusal, -5 a rate limit whose ``data.response.results`` carry ``retryAfterSeconds``,
  -32601 an unknown method).
- ``GET /api/v1/events``: Server-Sent Events, ``event:receive`` with ``{"envelope", "account"}``, and a
  ``:`` keep-alive every ``keepalive`` seconds (signal-cli: 15).
- ``GET /api/v1/check``: 200.

Receiving as with ``--receive-mode=on-connection``: what people write while no stream is open waits
and goes to the next stream opened. :meth:`FakeSignal.stall_streams` makes the open streams fall
silent (nothing more, not even keep-alives) as a dead connection would; what is written meanwhile
waits for a new stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.waiting import WAIT_TIMEOUT, Waiter
from tests.threaded import serve_in_thread

BOT = "+15550000001"
BOT_UUID = "0b0b0b0b-0000-4000-8000-000000000001"
GROUP = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
SHUTDOWN_TIMEOUT = 2.0


@dataclass
class BotMessage:
    """A message the bot sent: where, its texts (the first, then each edit) and styles, its files."""

    chat: str  # a person's number, or "group:" + the group id
    timestamp: int
    versions: list[tuple[str, list[str]]]  # (text, ["start:length:STYLE", ...])
    quote: tuple[int, str] | None = None
    attachments: list[tuple[str, str, bytes]] = field(default_factory=list)  # (name, type, data)
    voice_note: bool = False
    deleted: bool = False
    made: float = 0.0  # time.monotonic() of the send that made it
    touched: float = 0.0  # of the last send or edit that changed it


@dataclass
class _Stream:
    pending: list[dict[str, Any]] = field(default_factory=list)
    stalled: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class FakeSignal:
    """The daemon's state, guarded by ``lock`` (people write from the test's thread)."""

    def __init__(self, *, keepalive: float = 15.0) -> None:
        self.lock = threading.RLock()
        self.keepalive = keepalive
        self.people: dict[str, tuple[str, str]] = {}  # number -> (uuid, profile name)
        self.group_name = "Herald testers"
        self.waiting: list[dict[str, Any]] = []  # envelopes for the next stream
        self.pushed = 0  # envelopes written into a stream
        self.sent: list[BotMessage] = []
        self.send_times: list[float] = []
        self.typing: list[str] = []
        self.about = ""
        self.files: dict[str, tuple[str, bytes]] = {}  # attachment id -> (type, data)
        self._faults: list[float] = []  # retry-after of each send to refuse
        self._streams: list[_Stream] = []
        self._clock = itertools.count(int(time.time() * 1000))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._waiter = Waiter(self.lock, self.describe)
        self.url = ""

    # --- serving ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1") -> AsyncIterator[str]:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/api/v1/rpc", self._rpc)
        app.router.add_get("/api/v1/events", self._events)
        app.router.add_get("/api/v1/check", self._check)
        runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT, handler_cancellation=True
        )
        await runner.setup()
        self._loop, self._closing = asyncio.get_running_loop(), False
        try:
            site = web.TCPSite(runner, host, 0)
            await site.start()
            self.url = f"http://{host}:{runner.addresses[0][1]}"
            yield self.url
        finally:
            self._closing = True
            self._wake_all()
            await runner.cleanup()
            self._loop = None

    def serve_in_thread(self) -> AbstractContextManager[str]:
        return serve_in_thread(self.serve, "fake signal-cli daemon")

    def _wake_all(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for stream in list(self._streams):
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(stream.wake.set)

    async def _check(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        stream = _Stream()
        with self.lock:
            stream.pending, self.waiting = self.waiting, []
            self._streams.append(stream)
        try:
            while not self._closing:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.keepalive):
                        await stream.wake.wait()
                stream.wake.clear()
                with self.lock:
                    if stream.stalled:
                        continue
                    items, stream.pending = stream.pending, []
                for item in items:
                    await response.write(f"event:receive\ndata:{json.dumps(item)}\n\n".encode())
                    with self.lock:
                        self.pushed += 1
                if not items:
                    await response.write(b":\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            with self.lock:
                self._streams.remove(stream)
                self.waiting[:0] = stream.pending
        return response

    # --- JSON-RPC ----------------------------------------------------------------------------------

    async def _rpc(self, request: web.Request) -> web.Response:
        if not request.content_type.startswith("application/json"):
            return web.Response(status=415)
        body = await request.json()
        params = body.get("params") or {}
        handler = getattr(self, f"_m_{body.get('method')}", None)
        if handler is None:
            return _answer(body, error=(-32601, "Method not found"))
        with self.lock:
            try:
                result = handler(params)
            except _RpcError as exc:
                return _answer(body, error=(exc.code, exc.message), data=exc.data)
        self._wake_all()
        return _answer(body, result=result)

    def _m_listContacts(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if BOT not in (params.get("recipient") or []):
            return []
        return [{"number": BOT, "uuid": BOT_UUID, "name": "", "profile": {"givenName": "Herald"}}]

    def _m_listGroups(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        members = [BOT, *self.people]
        return [{"id": GROUP, "name": self.group_name, "isMember": True, "members": members}]

    def _chat(self, params: dict[str, Any]) -> str:
        if "groupId" in params:
            if params["groupId"] != GROUP:
                raise _RpcError(-1, "Invalid group id")
            return f"group:{GROUP}"
        recipients = params.get("recipient")
        recipients = [recipients] if isinstance(recipients, str) else recipients or []
        if len(recipients) != 1 or recipients[0] not in self.people:
            raise _RpcError(-1, f"Unregistered user {recipients!r}")
        return str(recipients[0])

    def _m_send(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._chat(params)
        edit = params.get("editTimestamp")
        if edit is None:
            self.send_times.append(time.monotonic())
        if self._faults and edit is None:
            wait = self._faults.pop(0)
            results = [{"recipientAddress": {"number": chat}, "type": "RATE_LIMIT_FAILURE",
                        "retryAfterSeconds": int(wait)}]  # fmt: skip
            raise _RpcError(-5, "Failed to send message due to rate limiting",
                            {"response": {"timestamp": next(self._clock), "results": results}})  # fmt: skip
        text = str(params.get("message") or "")
        styles = params.get("textStyle") or []
        styles = [styles] if isinstance(styles, str) else list(styles)
        files = params.get("attachment") or []
        files = [files] if isinstance(files, str) else files
        if not text and not files:
            raise _RpcError(-1, "Sending empty message is not allowed, either a message, attachment or "
                                "sticker must be given.")  # fmt: skip
        timestamp = next(self._clock)
        if edit is not None:
            target = next((m for m in self.sent if m.chat == chat and m.timestamp == edit), None)
            if target is None:
                raise _RpcError(-1, "Failed to send message")
            target.versions.append((text, styles))
            target.touched = time.monotonic()
        else:
            quote = params.get("quoteTimestamp")
            self.sent.append(
                BotMessage(chat, timestamp, [(text, styles)],
                           (int(quote), str(params.get("quoteAuthor"))) if quote is not None else None,
                           [_from_data_uri(item) for item in files], bool(params.get("voiceNote")),
                           made=time.monotonic(), touched=time.monotonic())
            )  # fmt: skip
        return {
            "timestamp": timestamp,
            "results": [{"recipientAddress": {"number": chat}, "type": "SUCCESS"}],
        }

    def _m_sendTyping(self, params: dict[str, Any]) -> dict[str, Any]:
        self.typing.append(self._chat(params))
        return {}

    def _m_remoteDelete(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._chat(params)
        for message in self.sent:
            if message.chat == chat and message.timestamp == params.get("targetTimestamp"):
                message.deleted = True
        return {"timestamp": next(self._clock), "results": []}

    def _m_getAttachment(self, params: dict[str, Any]) -> dict[str, Any]:
        found = self.files.get(str(params.get("id")))
        if found is None:
            raise _RpcError(-1, f"Could not find attachment with ID: {params.get('id')}")
        return {"data": base64.b64encode(found[1]).decode()}

    def _m_updateProfile(self, params: dict[str, Any]) -> dict[str, Any]:
        if "about" in params:
            self.about = str(params["about"])
        return {}

    # --- people ------------------------------------------------------------------------------------

    def add_person(self, number: str, name: str) -> None:
        with self.lock:
            self.people[number] = (f"{int(number[1:]):08x}-0000-4000-8000-000000000000", name)

    def message(
        self,
        sender: str,
        text: str = "",
        *,
        group: bool = False,
        mention_at: tuple[int, ...] = (),
        quote: BotMessage | None = None,
        files: tuple[tuple[str | None, str, bytes], ...] = (),
    ) -> dict[str, Any]:
        """``sender`` writes (to the bot, or in the group); ``mention_at``: UTF-16 offsets of U+FFFC
        that mention the bot; ``quote``: a bot message replied to; ``files``: (name, type, data).
        Returns the envelope as the event stream carries it."""
        with self.lock:
            uuid, name = self.people[sender]
            timestamp = next(self._clock)
            data: dict[str, Any] = {"timestamp": timestamp, "message": text or None, "expiresInSeconds": 0,
                                    "viewOnce": False}  # fmt: skip
            if mention_at:
                data["mentions"] = [{"name": BOT, "number": BOT, "uuid": BOT_UUID, "start": at, "length": 1}
                                    for at in mention_at]  # fmt: skip
            if group:
                data["groupInfo"] = {"groupId": GROUP, "groupName": self.group_name, "revision": 3,
                                     "type": "DELIVER"}  # fmt: skip
            if quote is not None:
                text_quoted = quote.versions[-1][0]
                data["quote"] = {"id": quote.timestamp, "author": BOT, "authorNumber": BOT,
                                 "authorUuid": BOT_UUID, "text": text_quoted, "attachments": []}  # fmt: skip
            if files:
                data["attachments"] = []
                for file_name, mime, content in files:
                    file_id = f"att{len(self.files) + 1}"
                    self.files[file_id] = (mime, content)
                    data["attachments"].append({"contentType": mime, "filename": file_name, "id": file_id,
                                                "size": len(content)})  # fmt: skip
            envelope = {"source": sender, "sourceNumber": sender, "sourceUuid": uuid, "sourceName": name,
                        "sourceDevice": 1, "timestamp": timestamp, "serverReceivedTimestamp": timestamp + 3,
                        "serverDeliveredTimestamp": timestamp + 5, "dataMessage": data}  # fmt: skip
            payload = {"envelope": envelope, "account": BOT}
            self._deliver(payload)
        return payload

    def redeliver(self, payload: dict[str, Any]) -> None:
        with self.lock:
            self._deliver(payload)

    def _deliver(self, payload: dict[str, Any]) -> None:
        live = [stream for stream in self._streams if not stream.stalled]
        if live:
            live[0].pending.append(payload)
            self._wake_all()
        else:
            self.waiting.append(payload)

    # --- faults, state and waits -------------------------------------------------------------------

    def stall_streams(self) -> None:
        """The open streams fall silent; what they had not written yet waits for the next stream."""
        with self.lock:
            for stream in self._streams:
                stream.stalled = True
                self.waiting[:0], stream.pending = stream.pending, []

    def fail_sends(self, count: int, retry_after: float) -> None:
        with self.lock:
            self._faults.extend([retry_after] * count)

    def receiving(self) -> bool:
        with self.lock:
            return any(not stream.stalled for stream in self._streams)

    def streams_opened(self) -> int:
        with self.lock:
            return len(self._streams)

    def settled(self) -> bool:
        """Nothing waits to be written into a stream."""
        with self.lock:
            return not self.waiting and not any(stream.pending for stream in self._streams)

    def bot_messages(self, chat: str) -> list[BotMessage]:
        with self.lock:
            return [message for message in self.sent if message.chat == chat and not message.deleted]

    async def wait_for(self, predicate: Any, timeout: float = WAIT_TIMEOUT, what: str | None = None) -> Any:  # noqa: ASYNC109
        return await self._waiter.wait_for(predicate, timeout, what)

    def describe(self) -> str:
        with self.lock:
            return f"{len(self.waiting)} waiting, {self.pushed} pushed, {len(self.sent)} sent"


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _answer(body: dict[str, Any], *, result: Any = None, error: tuple[int, str] | None = None,
            data: Any = None) -> web.Response:  # fmt: skip
    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": body.get("id")}
    if error is not None:
        answer["error"] = {"code": error[0], "message": error[1], "data": data}
    else:
        answer["result"] = result
    return web.json_response(answer)


def _from_data_uri(uri: str) -> tuple[str, str, bytes]:
    """``data:<type>;filename=<name>;base64,<data>`` as (name, type, data)."""
    head, _, encoded = uri.partition(",")
    fields = head.removeprefix("data:").split(";")
    names = [part.removeprefix("filename=") for part in fields[1:] if part.startswith("filename=")]
    return (names[0] if names else "", fields[0], base64.b64decode(encoded))
