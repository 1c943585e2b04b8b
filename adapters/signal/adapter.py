"""``SignalAdapter``: signal-cli's daemon (``daemon --http``) as a Herald platform.

Receiving is one long-lived ``GET /api/v1/events`` stream, watched: a stream silent for
``stream_timeout`` seconds (signal-cli sends a keep-alive every 15) or closed is replaced, after the
project's backoff, for as long as the adapter runs. With ``--receive-mode=on-connection`` signal-cli
fetches messages from Signal's servers only while a stream is open, so what people wrote while
Herald was away (or between two streams) arrives on the next one; an envelope delivered twice has
the same id (its author and timestamp, ``inbound``) and the inbox keeps the first. Envelopes are
handled one at a time, in order: the next is read only once the sink stored (or dropped) the one
before, so nothing is taken from the stream that the gateway has not recorded. signal-cli has no
acknowledgement of its own to withhold; what it handed over into a stream that broke before Herald
read it is gone (signal-cli had already confirmed it to Signal).

Sending is JSON-RPC ``send`` (with ``textStyle`` ranges, a quote of the message answered in a group,
``editTimestamp`` for streaming edits, data-URI attachments), ``sendTyping``, ``remoteDelete``; files
that arrive are fetched with ``getAttachment``. Conversion is in ``inbound``, markup in ``render``,
the wire in ``rpc``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import Sequence
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
    InboundSink,
    OutboundFile,
    OutboundText,
    OutboundVoice,
    SinkRetry,
)
from adapters.names import clean_name
from adapters.reconnect import Reconnect
from resilience.backoff import Backoff
from resilience.cancelling import cancel_and_wait
from resilience.loops import BackgroundLoop

from .inbound import GROUP_PREFIX, Me, message_id, person, split_id, to_inbound
from .render import STYLES, render_signal
from .rpc import SignalRpc, events
from .settings import ABOUT_LIMIT, MESSAGE_LIMIT, PLATFORM, SignalSettings

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 20  # seconds, a JSON-RPC call (signal-cli sends to each recipient before answering)
UPLOAD_TIMEOUT = 180  # seconds, a send with a file
CONNECT_TIMEOUT = 10  # seconds, opening the event stream
MAX_FILE_BYTES = 100 * 1024 * 1024  # Signal's attachment limit
STREAM_BACKOFF = Backoff(0.5, 30.0)
SINK_BACKOFF = Backoff(0.5, 30.0)
VOICE_TYPE = "audio/ogg"


class SignalAdapter(Adapter):
    """One Signal account served by signal-cli's daemon at ``settings.daemon_url``."""

    platform = PLATFORM
    prompt_hint = (
        "You are talking with people on Signal, a phone messenger. Keep messages short; bold, italics, "
        "strikethrough and code are shown, headings, tables and links behind words are not."
    )

    def __init__(self, account: str, settings: SignalSettings) -> None:
        self.capabilities = Capabilities(
            max_message_length=MESSAGE_LIMIT,
            length_unit="utf16",
            render=render_signal,
            can_edit=True,
            has_threads=False,
            max_file_bytes=MAX_FILE_BYTES,
            voice_notes=True,
        )
        self._account = account
        self._settings = settings
        self._me = Me(account)
        self._session: aiohttp.ClientSession | None = None
        self._rpc: SignalRpc | None = None
        self._sink: InboundSink | None = None
        self._receiver: BackgroundLoop | None = None
        self._commands: frozenset[str] = frozenset()
        self._status = AdapterStatus()
        self.handled = 0  # envelopes read from the stream and dealt with (the tests' "delivered")

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Ask the daemon who the account is (``listContacts`` of itself: its UUID, its profile name),
        then open the event stream. Raises :class:`DeliveryError` (retryable: the daemon is not
        reachable yet)."""
        if self._session is not None:
            raise RuntimeError("SignalAdapter.start called twice")
        session = aiohttp.ClientSession()
        rpc = SignalRpc(session, self._settings.daemon_url)
        try:
            found = await rpc.call(
                "listContacts", {"recipient": [self._account], "allRecipients": True}, timeout=REQUEST_TIMEOUT
            )
        except BaseException as exc:
            await session.close()
            if isinstance(exc, DeliveryError):
                raise DeliveryError(
                    f"signal-cli's daemon at {self._settings.daemon_url} did not answer ({exc}); start "
                    f"signal-cli -a {self._account} daemon --http=HOST:PORT --receive-mode=on-connection",
                    retryable=exc.retryable,
                ) from exc
            raise
        self._me = me_from(self._account, found)
        self._session, self._rpc, self._sink = session, rpc, sink
        self._status = AdapterStatus(connected=False, detail="opening the event stream",
                                     extra={"account": self._me.name})  # fmt: skip
        if receive:
            self._receiver = BackgroundLoop("the Signal event stream", self._receive).start()
        log.info("Signal adapter started for %s (%s)", self._me.name, self._settings.daemon_url)

    async def stop(self) -> None:
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            await receiver.stop()
        session, self._session, self._rpc, self._sink = self._session, None, None, None
        if session is not None:
            await session.close()
        self._status.connected = False

    def status(self) -> AdapterStatus:
        current = self._status
        return AdapterStatus(current.connected, current.detail, dict(current.extra))

    # --- receiving ------------------------------------------------------------------------------

    async def _receive(self) -> None:
        """The event stream, re-opened whenever it ends, fails or falls silent, until stopped."""
        link = Reconnect(STREAM_BACKOFF, "Signal event stream", log=log, status=self._status)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT)
        url = f"{self._settings.daemon_url}/api/v1/events"
        while True:
            session = self._session
            if session is None:
                return
            problem = "the daemon closed it"
            try:
                async with session.get(url, timeout=timeout) as response:
                    if response.status != 200:
                        raise DeliveryError(f"HTTP {response.status}", retryable=True)
                    link.recovered()
                    watch = asyncio.create_task(self._watch(response), name="signal-stream-watch")
                    try:
                        async for name, data in events(response):
                            if name == "receive":
                                await self._envelope(data)
                    finally:
                        await cancel_and_wait([watch])
                    if watch.done() and not watch.cancelled() and watch.result():
                        problem = f"silent for {self._settings.stream_timeout} s"
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, DeliveryError, ValueError, TimeoutError) as exc:
                problem = str(exc) or type(exc).__name__
            await link.failed(problem)

    async def _watch(self, response: aiohttp.ClientResponse) -> bool:
        """Close ``response`` once no byte arrived for ``stream_timeout`` seconds (True then). Counts the
        bytes the connection received, not those read: while a message is being stored nothing is read,
        and a loop busy for a moment does not make a live stream look silent."""
        limit = float(self._settings.stream_timeout)
        loop = asyncio.get_running_loop()
        seen, since = -1, loop.time()
        while True:
            await asyncio.sleep(limit / 4)
            total = response.content.total_bytes
            if total != seen:
                seen, since = total, loop.time()
            elif loop.time() - since >= limit:
                response.close()
                return True

    async def _envelope(self, data: str) -> None:
        try:
            payload = json.loads(data)
            message = to_inbound(payload, self._me, self._commands) if isinstance(payload, dict) else None
        except ValueError:
            log.warning("signal-cli sent an event that is not JSON; skipped")
            message = None
        if message is not None:
            await self._hand_over(message)
        self.handled += 1

    async def _hand_over(self, message: Any) -> None:
        """The sink stores ``message``, waiting out an unavailable database (nothing else is read from
        the stream meanwhile, and signal-cli will not send it again); any other failure loses it, loudly."""

        async def store() -> None:
            if (sink := self._sink) is not None:  # None only once stopped: going_on ends the wait
                await sink([message])

        retry = SinkRetry(SINK_BACKOFF, log=log)
        await retry.until_stored(store, "a Signal message", going_on=lambda: self._sink is not None)

    # --- sending --------------------------------------------------------------------------------

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """``send``; in a group the first part quotes the message it answers. ``key`` is not used:
        signal-cli deduplicates no send (``adapters.base``)."""
        params = {**self._target(address), "message": text.text, "textStyle": styles(text)}
        quoted = split_id(reply_to) if reply_to and address.chat_id.startswith(GROUP_PREFIX) else None
        if quoted is not None:
            params["quoteTimestamp"], params["quoteAuthor"] = quoted
        return await self._send(params, REQUEST_TIMEOUT)

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        """``send`` with ``editTimestamp``: Signal shows the new text, marked edited."""
        sent = split_id(message_id)
        if sent is None:
            raise DeliveryError(f"{message_id!r} is not a Signal message id", permanent=True)
        params = {**self._target(address), "message": text.text, "textStyle": styles(text),
                  "editTimestamp": sent[0]}  # fmt: skip
        await self._send(params, REQUEST_TIMEOUT)

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        sent = split_id(message_id)
        if sent is None:
            return
        await self._call("remoteDelete", {**self._target(address), "targetTimestamp": sent[0]})

    async def typing(self, address: ChatAddress) -> None:
        """``sendTyping``: Signal shows it for 15 seconds, or until the answer arrives."""
        try:
            await self._call("sendTyping", self._target(address))
        except DeliveryError as exc:
            log.debug("Signal typing indicator failed: %s", exc)

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        """``send`` with the file as a data URI (RFC 2397 with signal-cli's ``filename``)."""
        if len(file.data) > MAX_FILE_BYTES:
            raise DeliveryError(f"{file.name} is over Signal's {MAX_FILE_BYTES:,}-byte limit")
        params = {**self._target(address), "attachment": [data_uri(file.data, file.mime_type, file.name)]}
        return await self._send(params, UPLOAD_TIMEOUT)

    async def send_voice(
        self,
        address: ChatAddress,
        voice: OutboundVoice,
        *,
        reply_to: str | None = None,
        key: str | None = None,
    ) -> str:
        """``send`` with ``voiceNote``: the apps play it inline."""
        params = {**self._target(address), "attachment": [data_uri(voice.data, VOICE_TYPE, None)],
                  "voiceNote": True}  # fmt: skip
        return await self._send(params, UPLOAD_TIMEOUT)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """``getAttachment``: signal-cli already holds the file (it downloads what arrives)."""
        if attachment.size is not None and attachment.size > max_bytes:
            raise DeliveryError(f"the file is over {max_bytes:,} bytes", permanent=True)
        try:
            result = await self._call("getAttachment", {"id": attachment.file_id}, timeout=UPLOAD_TIMEOUT)
        except DeliveryError as exc:
            if exc.retryable:
                raise
            raise DeliveryError(f"the file is gone from signal-cli ({exc})", permanent=True) from exc
        encoded = result.get("data") if isinstance(result, dict) else None
        if not isinstance(encoded, str):
            raise DeliveryError("signal-cli returned no attachment data", permanent=True)
        if len(encoded) > (max_bytes + 2) // 3 * 4:
            raise DeliveryError(f"the file is over {max_bytes:,} bytes", permanent=True)
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise DeliveryError(
                "signal-cli returned attachment data that is not base64", permanent=True
            ) from exc

    async def set_commands(self, commands: list[CommandSpec]) -> None:
        """Signal has no command menu: the commands are recognised in groups, and (``publish_commands``)
        listed in the account's profile "about" text, as many as fit."""
        self._commands = frozenset(command.name for command in commands)
        if not self._settings.publish_commands:
            return
        about, left_out = about_text(commands)
        if left_out:
            log.warning("Signal's profile text holds %d characters: /%s left out of it", ABOUT_LIMIT,
                        " /".join(left_out))  # fmt: skip
        await self._call("updateProfile", {"about": about})

    # --- helpers --------------------------------------------------------------------------------

    def _target(self, address: ChatAddress) -> dict[str, Any]:
        if address.chat_id.startswith(GROUP_PREFIX):
            return {"groupId": address.chat_id.removeprefix(GROUP_PREFIX)}
        return {"recipient": [address.chat_id]}

    async def _send(self, params: dict[str, Any], timeout: float) -> str:  # noqa: ASYNC109
        result = await self._call("send", params, timeout=timeout)
        timestamp = result.get("timestamp") if isinstance(result, dict) else None
        if not isinstance(timestamp, int):
            raise DeliveryError("signal-cli's send returned no timestamp", retryable=True)
        return message_id(timestamp, self._account)

    async def _call(self, method: str, params: dict[str, Any], *, timeout: float = REQUEST_TIMEOUT) -> Any:  # noqa: ASYNC109
        rpc = self._rpc
        if rpc is None:
            raise DeliveryError("the Signal adapter is not running", retryable=True)
        return await rpc.call(method, params, timeout=timeout)


def me_from(account: str, contacts: object) -> Me:
    """The account as ``listContacts`` of itself shows it (its number alone when it does not)."""
    for contact in contacts if isinstance(contacts, list) else ():
        if isinstance(contact, dict) and contact.get("number") == account:
            found = contact.get("profile")
            profile: dict[str, Any] = found if isinstance(found, dict) else {}
            name = clean_name(str(profile.get("givenName") or contact.get("name") or "")) or "Herald"
            uuid = person(contact.get("uuid"), None)
            return Me(account, uuid, name)
    return Me(account)


def styles(text: OutboundText) -> list[str]:
    """The parts' entities as signal-cli's ``start:length:STYLE`` (UTF-16 units)."""
    return [f"{e.offset}:{e.length}:{STYLES[e.type]}" for e in text.entities if e.type in STYLES]


def data_uri(data: bytes, mime: str, name: str | None) -> str:
    named = f";filename={name.replace(';', '_').replace(',', '_')}" if name else ""
    return f"data:{mime}{named};base64,{base64.b64encode(data).decode()}"


def about_text(commands: Sequence[CommandSpec]) -> tuple[str, list[str]]:
    """``/help /new …`` within Signal's profile text limit; the names that did not fit."""
    about, left_out = "", []
    for command in commands:
        longer = f"{about} /{command.name}".strip()
        if len(longer) <= ABOUT_LIMIT:
            about = longer
        else:
            left_out.append(command.name)
    return about, left_out
