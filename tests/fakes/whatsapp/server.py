"""The fake WhatsApp Cloud API: one business number, people who write to it, and what the bot sent.

Graph API (``/{version}/...``, every call with ``Authorization: Bearer TOKEN``, errors in Graph's
shape ``{"error": {"message", "type", "code", "error_data": {"details"}}}``):

- ``GET /{phone-number-id}``: the number (``verified_name``, ``display_phone_number``);
- ``POST /{phone-number-id}/messages``: text (at most 4,096 characters), document, audio, image by an
  uploaded media id, template (only the approved ones), a reply's ``context``, and ``status: read``
  (with ``typing_indicator``) for a message a person sent. Anything but a template to a person whose
  last message is over 24 hours old is refused with 131047, as Meta does;
- ``POST /{phone-number-id}/media`` (multipart ``file``, ``type``, ``messaging_product``): a media id;
- ``GET /{media-id}``: its download ``url`` (which needs the token too), ``mime_type``, ``file_size``;
- ``POST /{phone-number-id}/conversational_automation``: the commands WhatsApp suggests on ``/``.

Webhooks: what people write (:meth:`FakeWhatsApp.text`, :meth:`~FakeWhatsApp.document`...) and
statuses (:meth:`~FakeWhatsApp.status`) are POSTed to the callback URL, signed with
``X-Hub-Signature-256`` (HMAC-SHA256 of the body with the app secret), in order, each retried until it
is answered 200 (Meta retries for days). The callback URL is verified first, as Meta does when it is
saved: a GET with ``hub.mode=subscribe``, ``hub.verify_token`` and ``hub.challenge``, which must come
back. Thread safe: a test may drive a fake served from another thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.waiting import WAIT_TIMEOUT, Waiter
from tests.threaded import serve_in_thread

TOKEN = "EAAG-fake-whatsapp-access-token"
APP_SECRET = "fake-whatsapp-app-secret"
VERIFY_TOKEN = "fake-whatsapp-verify-token"
NUMBER_ID = "106540352242922"
WABA_ID = "102290129340398"
DISPLAY_NUMBER = "15550100"
VERIFIED_NAME = "Herald Test"
TEXT_LIMIT = 4096
WINDOW = 24 * 3600
TEMPLATES = frozenset({"herald_reply_waiting"})
OUTSIDE_WINDOW = (
    "Message failed to send because more than 24 hours have passed since the customer last replied to "
    "this number."
)
RETRY_PAUSES = (0.05, 0.1, 0.2, 0.5, 1.0)  # between a webhook's tries (Meta's are minutes to hours)


@dataclass
class BotMessage:
    """A message the bot sent (``kind``: text, document, audio, image, template)."""

    id: str
    to: str
    kind: str
    body: dict[str, Any]
    context: str | None
    media: tuple[str, str, bytes] | None = None  # (file name, MIME type, content)
    made: float = field(default_factory=time.monotonic)  # when the fake accepted it

    @property
    def text(self) -> str:
        return str(self.body.get("body", "")) if self.kind == "text" else ""


@dataclass
class _Webhook:
    payload: dict[str, Any]
    tries: int = 0
    answers: list[int] = field(default_factory=list)


class FakeWhatsApp:
    """See the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.waiter = Waiter(self.lock, self.describe)
        self._ids = itertools.count(1)
        self.names: dict[str, str] = {}
        self.last_inbound: dict[str, float] = {}  # person -> when they last wrote (the fake's window)
        self.inbound: dict[str, dict[str, Any]] = {}  # message id -> the message as sent in the webhook
        self.sent: list[BotMessage] = []
        self.reads: list[tuple[str, bool]] = []  # (message id, with a typing indicator)
        self.media: dict[str, tuple[str, str, bytes]] = {}  # id -> (name, MIME type, content)
        self.commands: list[dict[str, str]] = []
        self.send_times: list[float] = []  # time.monotonic() of each message POST, refused ones too
        self.refusals: list[int] = []  # the error codes of refused message POSTs
        self.callback_url: str | None = None
        self.verified = False
        self.delivered: list[_Webhook] = []
        self._pending: list[_Webhook] = []
        self._failures: list[int] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.root = ""

    # --- people ---------------------------------------------------------------------------------

    def add_person(self, wa_id: str, name: str) -> None:
        with self.lock:
            self.names[wa_id] = name

    def text(self, person: str, body: str, *, reply_to: str | None = None, ago: float = 0) -> str:
        """``person`` writes ``body`` (``ago`` seconds ago: a webhook Meta could deliver only now); returns
        the message's id."""
        return self._writes(person, "text", {"body": body}, reply_to=reply_to, ago=ago)

    def document(self, person: str, name: str, data: bytes, mime_type: str, caption: str = "") -> str:
        media = self._store(name, mime_type, data)
        body = {"id": media, "filename": name, "mime_type": mime_type, "sha256": _sha256(data)}
        return self._writes(person, "document", {**body, "caption": caption} if caption else body)

    def image(self, person: str, data: bytes, mime_type: str, caption: str = "") -> str:
        media = self._store("image", mime_type, data)
        body = {"id": media, "mime_type": mime_type, "sha256": _sha256(data)}
        return self._writes(person, "image", {**body, "caption": caption} if caption else body)

    def voice_note(self, person: str, data: bytes) -> str:
        media = self._store("voice.ogg", "audio/ogg; codecs=opus", data)
        return self._writes(
            person, "audio", {"id": media, "mime_type": "audio/ogg; codecs=opus", "voice": True}
        )

    def redeliver(self, message_id: str) -> None:
        """Meta POSTs the message again (a retry whose first answer it never saw)."""
        with self.lock:
            message = self.inbound[message_id]
        self._post(_messages_value(message, self.names.get(message["from"], "")))

    def age(self, person: str, seconds: float) -> None:
        """``person``'s last message was sent ``seconds`` ago (as far as the fake's window goes)."""
        with self.lock:
            self.last_inbound[person] = time.time() - seconds

    def status(self, message_id: str, status: str, *, error: tuple[int, str] | None = None) -> None:
        """A status webhook for a message the bot sent (``error``: a failed one's code and details)."""
        with self.lock:
            [message] = [m for m in self.sent if m.id == message_id]
        item: dict[str, Any] = {
            "id": message_id, "status": status, "timestamp": str(int(time.time())),
            "recipient_id": message.to,
        }  # fmt: skip
        if error is not None:
            code, details = error
            item["errors"] = [
                {"code": code, "title": details, "message": details, "error_data": {"details": details}}
            ]
        self._post({"statuses": [item]})

    def _writes(
        self, person: str, kind: str, body: dict[str, Any], *, reply_to: str | None = None, ago: float = 0
    ) -> str:
        now = time.time() - ago
        message: dict[str, Any] = {
            "from": person, "id": f"wamid.in.{next(self._ids)}", "timestamp": str(int(now)),
            "type": kind, kind: body,
        }  # fmt: skip
        if reply_to is not None:
            message["context"] = {"from": DISPLAY_NUMBER, "id": reply_to}
        with self.lock:
            self.inbound[message["id"]] = message
            self.last_inbound[person] = now
            name = self.names.get(person, "")
        self._post(_messages_value(message, name))
        return str(message["id"])

    def _store(self, name: str, mime_type: str, data: bytes) -> str:
        media = f"{next(self._ids)}0000"
        with self.lock:
            self.media[media] = (name, mime_type, data)
        return media

    # --- Meta's side of the webhook -------------------------------------------------------------

    def webhooks_to(self, url: str) -> None:
        """The app's callback URL (verified before the first POST)."""
        with self.lock:
            self.callback_url, self.verified = url, False

    def verify(self) -> bool:
        """Meta's verification GET, from the calling thread: whether the challenge came back."""
        with self.lock:
            url = self.callback_url
        if url is None:
            return False
        challenge = secrets.token_hex(8)
        query = urllib.parse.urlencode(
            {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": challenge}
        )
        try:
            with urllib.request.urlopen(f"{url}?{query}", timeout=2) as response:
                ok = bool(response.status == 200 and response.read().decode() == challenge)
        except (urllib.error.URLError, OSError):
            ok = False
        with self.lock:
            self.verified = self.verified or ok
        return ok

    def _post(self, value: dict[str, Any]) -> None:
        payload = {
            "object": "whatsapp_business_account",
            "entry": [{"id": WABA_ID, "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": DISPLAY_NUMBER, "phone_number_id": NUMBER_ID},
                **value,
            }}]}],
        }  # fmt: skip
        with self.lock:
            self._pending.append(_Webhook(payload))
            loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            loop.call_soon_threadsafe(wake.set)

    async def post_signed(
        self, body: bytes, *, secret: str = APP_SECRET, signature: str | None = None
    ) -> int:
        """POST ``body`` to the callback URL signed as Meta signs it (or with ``signature``); the status."""
        assert self.callback_url is not None
        digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-Hub-Signature-256": signature or f"sha256={digest}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.callback_url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as response,
        ):
            await response.read()
            return response.status

    async def _deliver(self) -> None:
        """POST the pending webhooks in order, each until answered 200."""
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                with self.lock:
                    head = self._pending[0] if self._pending else None
                    verified = self.verified
                if head is None:
                    break
                if not verified:
                    await asyncio.to_thread(self.verify)
                status = 0
                if self.verified:
                    try:
                        status = await self.post_signed(json.dumps(head.payload).encode())
                    except (aiohttp.ClientError, TimeoutError, OSError):
                        status = 0
                with self.lock:
                    head.tries += 1
                    head.answers.append(status)
                    if status == 200:
                        self._pending.pop(0)
                        self.delivered.append(head)
                if status != 200:
                    await asyncio.sleep(RETRY_PAUSES[min(head.tries, len(RETRY_PAUSES)) - 1])

    # --- faults ---------------------------------------------------------------------------------

    def fail_next(self, count: int, code: int) -> None:
        """The next ``count`` message sends are refused with Meta error ``code`` (130429: throughput)."""
        with self.lock:
            self._failures.extend([code] * count)

    # --- what the bot did -----------------------------------------------------------------------

    def bot_messages(self, person: str) -> list[BotMessage]:
        with self.lock:
            return [message for message in self.sent if message.to == person]

    def pending_webhooks(self) -> int:
        with self.lock:
            return len(self._pending)

    def describe(self) -> str:
        with self.lock:
            answers = [webhook.answers for webhook in self._pending[:3]]
            return (f"pending webhooks={len(self._pending)} answers={answers} sent={len(self.sent)} "
                    f"refusals={self.refusals[-5:]} verified={self.verified}")  # fmt: skip

    async def wait_for(self, predicate: Any, timeout: float = WAIT_TIMEOUT, what: str | None = None) -> Any:  # noqa: ASYNC109
        return await self.waiter.wait_for(predicate, timeout, what)

    # --- serving --------------------------------------------------------------------------------

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on this loop; yields the Graph API base URL (``http://HOST:PORT``)."""
        app = web.Application(client_max_size=128 * 1024 * 1024)
        app.router.add_get("/download/{media}", self._download)
        app.router.add_route("*", "/{version}/{node}", self._node)
        app.router.add_route("*", "/{version}/{node}/{edge}", self._edge)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        deliverer = asyncio.create_task(self._deliver())
        if self._pending:
            self._wake.set()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            self.root = f"http://{host}:{runner.addresses[0][1]}"
            yield self.root
        finally:
            deliverer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await deliverer
            await runner.cleanup()
            self._loop = self._wake = None

    def serve_in_thread(self) -> AbstractContextManager[str]:
        return serve_in_thread(self.serve, "fake WhatsApp Cloud API")

    # --- the Graph API --------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {TOKEN}"

    async def _node(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        node = request.match_info["node"]
        if request.method != "GET":
            return _error(400, 100, "Unsupported request - method type: " + request.method.lower())
        if node == NUMBER_ID:
            return web.json_response({
                "verified_name": VERIFIED_NAME, "display_phone_number": DISPLAY_NUMBER, "id": NUMBER_ID,
                "quality_rating": "GREEN",
            })  # fmt: skip
        with self.lock:
            media = self.media.get(node)
        if media is None:
            return _error(400, 100, f"Unsupported get request. Object with ID '{node}' does not exist")
        _, mime_type, data = media
        return web.json_response({
            "messaging_product": "whatsapp", "url": f"{self.root}/download/{node}", "mime_type": mime_type,
            "sha256": _sha256(data), "file_size": len(data), "id": node,
        })  # fmt: skip

    async def _download(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return web.Response(status=401)
        with self.lock:
            media = self.media.get(request.match_info["media"])
        if media is None:
            return web.Response(status=404)
        return web.Response(body=media[2], content_type=media[1].split(";")[0])

    async def _edge(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        node, edge = request.match_info["node"], request.match_info["edge"]
        if node != NUMBER_ID or request.method != "POST":
            return _error(400, 100, f"Unsupported {request.method.lower()} request on {node}/{edge}")
        if edge == "media":
            return await self._upload(request)
        try:
            body = await request.json()
        except ValueError:
            return _error(400, 100, "Invalid JSON")
        if edge == "conversational_automation":
            with self.lock:
                self.commands = list(body.get("commands") or [])
            return web.json_response({"success": True})
        if edge == "messages":
            return self._message(body)
        return _error(400, 100, f"Unknown path components: /{edge}")

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        fields: dict[str, Any] = {}
        async for part in await request.multipart():
            if isinstance(part, aiohttp.BodyPartReader) and part.name:
                fields[part.name] = (part.filename, part.headers.get("Content-Type", ""), await part.read())
        if fields.get("messaging_product", (None, "", b""))[2] != b"whatsapp" or "file" not in fields:
            return _error(400, 100, "The parameter messaging_product and file are required")
        name, mime_type, data = fields["file"]
        return web.json_response({"id": self._store(name or "file", mime_type, bytes(data))})

    def _message(self, body: dict[str, Any]) -> web.StreamResponse:
        if body.get("messaging_product") != "whatsapp":
            return _error(400, 100, "The parameter messaging_product is required.")
        if body.get("status") == "read":
            with self.lock:
                known = body.get("message_id") in self.inbound
                if known:
                    self.reads.append((str(body["message_id"]), "typing_indicator" in body))
            return web.json_response({"success": True}) if known else _error(400, 100, "Invalid message_id")
        with self.lock:
            self.send_times.append(time.monotonic())
            code = self._failures.pop(0) if self._failures else None
            if code is not None:
                self.refusals.append(code)
                return _error(400, code, "Too many messages sent from this phone number" if code == 130429
                              else f"fault {code}")  # fmt: skip
        to, kind = str(body.get("to") or ""), str(body.get("type") or "text")
        content = body.get(kind)
        if not to or not isinstance(content, dict):
            return _error(400, 100, f"The parameter {kind} is required.")
        refused = self._refusal(to, kind, content)
        if refused is not None:
            with self.lock:
                self.refusals.append(refused[0])
            return _error(400, *refused)
        context = (body.get("context") or {}).get("message_id")
        with self.lock:
            media = self.media.get(str(content.get("id"))) if kind in ("document", "audio", "image") else None
            message = BotMessage(f"wamid.out.{next(self._ids)}", to, kind, content, context, media)
            self.sent.append(message)
        return web.json_response({
            "messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
            "messages": [{"id": message.id}],
        })  # fmt: skip

    def _refusal(self, to: str, kind: str, content: dict[str, Any]) -> tuple[int, str] | None:
        """Meta's refusal of a message (code and details), or None."""
        with self.lock:
            last = self.last_inbound.get(to)
            media_known = str(content.get("id")) in self.media
        if kind == "template":
            if content.get("name") not in TEMPLATES:
                return 132001, "Template name does not exist in the translation"
            return None
        if last is None or time.time() - last > WINDOW:
            return 131047, OUTSIDE_WINDOW
        if kind == "text":
            text = str(content.get("body") or "")
            if not text or len(text) > TEXT_LIMIT:
                return 100, f"Param text['body'] must be between 1 and {TEXT_LIMIT} characters long."
        elif kind in ("document", "audio", "image"):
            if not media_known:
                return 131053, "Media upload error: unknown media id"
        else:
            return 100, f"Unsupported message type {kind}"
        return None


def _messages_value(message: dict[str, Any], name: str) -> dict[str, Any]:
    return {"contacts": [{"profile": {"name": name}, "wa_id": message["from"]}], "messages": [message]}


def _error(status: int, code: int, details: str) -> web.Response:
    return web.json_response(
        {"error": {"message": f"(#{code}) {details}", "type": "OAuthException", "code": code,
                   "error_data": {"messaging_product": "whatsapp", "details": details},
                   "fbtrace_id": "AfakeTrace"}},
        status=status,
    )  # fmt: skip


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
