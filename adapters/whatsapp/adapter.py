"""``WhatsAppAdapter``: Meta's webhook in, the Cloud API's ``/messages`` out.

Inbound: a POST is judged by its ``X-Hub-Signature-256`` first (a bad one is answered 401 and nothing
of it is read further), then its messages are handed to the sink and only then is it answered 200
(Meta retries anything else, for days; a retry of a stored message is a duplicate the inbox drops).
Statuses of the bot's own messages go to the gateway's status sink (recorded on their outbox items;
a failed one fails its item). Every person's last message time is recorded (the 24-hour window,
``window``), durably in the adapter's records, before the sink gets the message, so the reply finds
the window open.

Outbound: a reply is sent as free text only inside the window; outside it the configured template is
sent instead, once, or nothing (a ``DeliveryError`` the gateway records as failed) and the owner is told
in the log either way. WhatsApp cannot edit or delete a business's messages: ``can_edit`` is off, so
the gateway sends each answer whole. ``typing`` marks the person's last message read (blue ticks) and
shows "typing…" until the reply or 25 seconds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from adapters.base import (
    Adapter,
    AdapterStatus,
    Attachment,
    Capabilities,
    ChatAddress,
    CommandSpec,
    DeliveryError,
    InboundMessage,
    InboundSink,
    OutboundFile,
    OutboundText,
    OutboundVoice,
    SendRate,
    SinkUnavailable,
    WebhookReply,
)
from adapters.records import MemoryRecordStore, RecordStore
from resilience.unreachable import Unreachable

from .graph import OUTSIDE_WINDOW, Graph, GraphError
from .render import TEXT_LIMIT, render_whatsapp
from .settings import GRAPH_API, PLATFORM, RECORDS, WEBHOOK_PATH, WhatsAppSettings
from .webhook import SIGNATURE_HEADER, challenge, read, signature_ok
from .window import WINDOW, Window, closed_notice, later

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 100 * 1024 * 1024  # a document: the Cloud API's largest media
MAX_COMMANDS = 30  # WhatsApp shows at most 30 commands
MAX_COMMAND_NAME = 32
MAX_COMMAND_DESCRIPTION = 256


class WhatsAppAdapter(Adapter):
    """One business number of Meta's Cloud API (see the module docstring)."""

    platform = PLATFORM
    webhook_path = WEBHOOK_PATH
    prompt_hint = (
        "You are talking with one person on WhatsApp, on a phone. Keep answers short; bold, italics, lists "
        "and code blocks are converted to WhatsApp's formatting, tables and link labels are not (write "
        "addresses in full)."
    )

    def __init__(
        self,
        token: str,
        settings: WhatsAppSettings,
        *,
        app_secret: str,
        verify_token: str,
        records: RecordStore | None = None,
        admins: frozenset[str] = frozenset(),
    ) -> None:
        if not settings.phone_number_id:
            raise ValueError("whatsapp.phone_number_id is not set")
        self.capabilities = Capabilities(
            max_message_length=TEXT_LIMIT,
            length_unit="chars",
            render=render_whatsapp,
            can_edit=False,
            has_threads=False,
            max_file_bytes=MAX_FILE_BYTES,
            voice_notes=True,
        )
        self._token = token
        self._settings = settings
        self._number = settings.phone_number_id
        self._app_secret = app_secret
        self._verify_token = verify_token
        self._records = records or MemoryRecordStore(RECORDS)
        self._admins = admins  # their WhatsApp ids: told when a reply cannot go out
        self._session: aiohttp.ClientSession | None = None
        self._graph: Graph | None = None
        self._sink: InboundSink | None = None
        self._status = AdapterStatus()

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Checks the token on the number (``GET /{phone-number-id}``); webhooks are taken from then on."""
        if self._graph is not None:
            raise RuntimeError("WhatsAppAdapter.start called twice")
        session = aiohttp.ClientSession()
        graph = Graph(session, self._settings.api_base or GRAPH_API, self._settings.api_version,
                      self._number, self._token)  # fmt: skip
        try:
            info = await graph.number_info()
        except BaseException:
            await session.close()
            raise
        self._session, self._graph, self._sink = session, graph, sink
        name = str(info.get("verified_name") or info.get("display_phone_number") or self._number)
        self._status = AdapterStatus(connected=True, extra={"number": name})
        log.info("WhatsApp adapter started for %s (webhook at %s)", name, self.webhook_path)

    async def stop(self) -> None:
        session, self._session, self._graph, self._sink = self._session, None, None, None
        if session is not None:
            await session.close()
        self._status.connected = False

    def status(self) -> AdapterStatus:
        current = self._status
        return AdapterStatus(connected=current.connected and self._graph is not None, detail=current.detail,
                             extra=dict(current.extra))  # fmt: skip

    def send_rates(self, address: ChatAddress) -> Sequence[SendRate]:
        """A number sends up to 80 messages a second (Meta's default throughput)."""
        return (SendRate("bot", 80, 1),)

    # --- the webhook ----------------------------------------------------------------------------

    async def verify_webhook(self, query: Mapping[str, str]) -> WebhookReply:
        """Meta's check of the callback URL: its challenge back when the verify token matches."""
        answer = challenge(query, self._verify_token)
        if answer is None:
            log.warning("Refused a WhatsApp webhook verification: wrong WHATSAPP_VERIFY_TOKEN or mode")
            return WebhookReply(403, b"verification failed")
        return WebhookReply(200, answer.encode())

    async def receive_webhook(self, body: bytes, headers: Mapping[str, str]) -> WebhookReply:
        """401 for a missing or wrong signature (nothing is read or stored), 200 once stored."""
        lowered = {key.lower(): value for key, value in headers.items()}
        if not signature_ok(self._app_secret, body, lowered.get(SIGNATURE_HEADER.lower())):
            log.warning("Refused a WhatsApp webhook POST with a missing or wrong signature")
            return WebhookReply(401, b"invalid signature")
        sink = self._sink
        if sink is None:
            return WebhookReply(503, b"not started")
        try:
            received = read(json.loads(body), self._number)
        except (UnicodeDecodeError, ValueError):
            return WebhookReply(400, b"not a WhatsApp webhook body")
        try:
            now = time.time()
            messages = [m if m.timestamp else _stamped(m, now) for m in received.messages]
            for message in messages:
                await self._opened(message)
            if messages:
                await sink(messages)
            if received.statuses and self.status_sink is not None:
                await self.status_sink(received.statuses)
        except (SinkUnavailable, Unreachable) as exc:  # the database is away (the inbox or the records)
            log.warning("Could not store a WhatsApp webhook (%s); answering 503 so Meta retries", exc)
            return WebhookReply(503)
        except Exception:
            log.exception("Storing a WhatsApp webhook failed; answering 500 so Meta retries")
            return WebhookReply(500)
        return WebhookReply(200)

    async def _opened(self, message: InboundMessage) -> None:
        """``message``'s sender wrote at its time: the window is open 24 hours from then; its id is what
        ``typing`` marks read (kept with the window, so any process of a cluster finds it)."""
        key = f"window:{message.user_id}"
        stored = await self._records.get(key)
        value = stored.value if stored is not None else {}
        last = value.get("last") if isinstance(value.get("last"), int | float) else None
        start = later(last, message.timestamp)
        newest = message.message_id if start == message.timestamp else str(value.get("message") or "")
        await self._records.put(key, {"last": start, "message": newest}, expires_at=start + WINDOW)

    async def _window(self, person: str) -> Window:
        stored = await self._records.get(f"window:{person}")
        last = stored.value.get("last") if stored is not None else None
        return Window(float(last) if isinstance(last, int | float) else None)

    # --- outbound -------------------------------------------------------------------------------

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """A text message (``key`` is not used: the Cloud API deduplicates no send, ``adapters.base``)."""
        body: dict[str, Any] = {"type": "text", "text": {"body": text.text, "preview_url": False}}
        return await self._send(address.chat_id, body, reply_to, "a message")

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        if len(file.data) > MAX_FILE_BYTES:
            raise DeliveryError(f"{file.name} is over WhatsApp's {MAX_FILE_BYTES:,}-byte limit")
        closed = await self._may_send(address.chat_id)
        if closed is not None:
            return await self._template(address.chat_id, closed)
        media = await self._started().upload(file.data, file.mime_type, file.name)
        body = {"type": "document", "document": {"id": media, "filename": file.name}}
        return await self._send(address.chat_id, body, reply_to, f"the file {file.name}")

    async def send_voice(
        self,
        address: ChatAddress,
        voice: OutboundVoice,
        *,
        reply_to: str | None = None,
        key: str | None = None,
    ) -> str:
        """An OGG/Opus audio message, which WhatsApp plays as a voice note."""
        closed = await self._may_send(address.chat_id)
        if closed is not None:
            return await self._template(address.chat_id, closed)
        media = await self._started().upload(voice.data, "audio/ogg", "voice.ogg")
        return await self._send(
            address.chat_id, {"type": "audio", "audio": {"id": media}}, reply_to, "a voice note"
        )

    async def _send(self, person: str, body: dict[str, Any], reply_to: str | None, what: str) -> str:
        """Send ``body`` to ``person`` if the window allows it (else the template, or nothing)."""
        closed = await self._may_send(person)
        if closed is not None:  # outside the window: the template (or nothing)
            return await self._template(person, closed)
        message = {"recipient_type": "individual", "to": person, **body}
        if reply_to:
            message["context"] = {"message_id": reply_to}
        try:
            answer = await self._started().message(message, what)
        except GraphError as exc:
            if exc.code != OUTSIDE_WINDOW:
                raise
            return await self._template(person, await self._window(person))  # our record was out of date
        return _message_id(answer)

    async def _may_send(self, person: str) -> Window | None:
        """None when free text may go to ``person`` now, else their (closed) window."""
        window = await self._window(person)
        return None if window.is_open(time.time()) else window

    async def _template(self, person: str, window: Window) -> str:
        """Outside the window: the configured template once per closed window, or a ``DeliveryError``;
        the owner is told either way (the log, and the admins on WhatsApp: :meth:`_tell_admins`)."""
        template = self._settings.template
        if not template:
            notice = closed_notice(person, None, window.closes_at())
            log.warning("%s", notice)
            await self._tell_admins(person, window, notice)
            raise DeliveryError(notice)
        key = f"template:{person}"
        sent = await self._records.get(key)
        if sent is not None and sent.value.get("after") == window.last_inbound:
            raise DeliveryError(f"WhatsApp: the template '{template}' already went to {person}; the rest of "
                                "the reply was not delivered")  # fmt: skip
        language = {"code": self._settings.template_language}
        body = {"type": "template", "template": {"name": template, "language": language}}
        answer = await self._started().message({"recipient_type": "individual", "to": person, **body},
                                               f"the template {template}")  # fmt: skip
        await self._records.put(key, {"after": window.last_inbound}, expires_at=time.time() + WINDOW)
        notice = closed_notice(person, template, window.closes_at())
        log.warning("%s", notice)
        await self._tell_admins(person, window, notice)
        return _message_id(answer)

    async def _tell_admins(self, person: str, window: Window, notice: str) -> None:
        """``notice`` to each admin on WhatsApp (``gateway.admins``) whose own window is open, once per
        closed window of ``person`` (not to an admin whose window is closed too: the log has it). Best
        effort: a failure is logged."""
        marker = f"told:{person}"
        told = await self._records.get(marker)
        if told is not None and told.value.get("after") == window.last_inbound:
            return
        await self._records.put(marker, {"after": window.last_inbound}, expires_at=time.time() + WINDOW)
        for admin in sorted(self._admins - {person}):
            if not (await self._window(admin)).is_open(time.time()):
                continue
            text = {"body": notice.removeprefix("WhatsApp: "), "preview_url": False}
            try:
                await self._started().message(
                    {"to": admin, "type": "text", "text": text}, "a notice to an admin"
                )
            except DeliveryError as exc:
                log.info("Could not tell WhatsApp admin %s: %s", admin, exc)

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        raise DeliveryError("WhatsApp cannot edit a business's messages", permanent=True)

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        raise DeliveryError("WhatsApp cannot delete a business's messages")

    async def typing(self, address: ChatAddress) -> None:
        """Mark the person's last message read and show "typing…" (best effort)."""
        graph = self._graph
        try:
            stored = await self._records.get(f"window:{address.chat_id}")
            message_id = stored.value.get("message") if stored is not None else None
            if not message_id or graph is None:
                return
            body = {"status": "read", "message_id": message_id, "typing_indicator": {"type": "text"}}
            await graph.message(body, "a read receipt")
        except (DeliveryError, Unreachable) as exc:
            log.info("WhatsApp read receipt failed: %s", exc)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """``GET /{media-id}`` for its address, then the file (both with the token)."""
        graph = self._started()
        if not attachment.file_id:
            raise DeliveryError(f"WhatsApp sent no file for this {attachment.kind}", permanent=True)
        info = await graph.media_url(attachment.file_id)
        size = info.get("file_size")
        if isinstance(size, int) and size > max_bytes:
            raise DeliveryError(f"the file is {size:,} bytes, over {max_bytes:,}", permanent=True)
        url = info.get("url")
        if not isinstance(url, str) or not url:
            raise DeliveryError("WhatsApp gave no address for the file", permanent=True)
        return await graph.download(url, max_bytes)

    async def set_commands(self, commands: list[CommandSpec]) -> None:
        """WhatsApp's commands (shown when a person types ``/``): at most 30, the rest left out with a
        warning; a chosen command arrives as a message ``/name``."""
        if len(commands) > MAX_COMMANDS:
            log.warning("WhatsApp shows %d commands at most; left out: %s", MAX_COMMANDS,
                        ", ".join(c.name for c in commands[MAX_COMMANDS:]))  # fmt: skip
        listed = [
            {
                "command_name": c.name[:MAX_COMMAND_NAME],
                "command_description": c.description[:MAX_COMMAND_DESCRIPTION],
            }
            for c in commands[:MAX_COMMANDS]
        ]
        await self._started().commands(listed)

    def _started(self) -> Graph:
        if self._graph is None:
            raise DeliveryError("the WhatsApp adapter is not running", retryable=True)
        return self._graph


def _message_id(answer: Mapping[str, Any]) -> str:
    messages = answer.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict) and messages[0].get("id"):
        return str(messages[0]["id"])
    raise DeliveryError("WhatsApp accepted the message but gave no id", retryable=False)


def _stamped(message: InboundMessage, now: float) -> InboundMessage:
    return replace(message, timestamp=now)
