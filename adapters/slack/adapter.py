"""``SlackAdapter``: lifecycle, the inbound paths (Socket Mode, the Events API) and outbound operations.

Conversion is in ``inbound``, markup in ``render``, the socket's replacement hook in ``socket``, the
gap's read-back in ``catchup``, downloads in ``files``, error typing in ``errors``; this module wires
them to one ``AsyncWebClient``.

Both inbound paths end in :meth:`SlackAdapter._hand_over`: convert, hand to the sink, and only then
acknowledge (an envelope's ack, a 200 to the POST) and advance the channel's catch-up cursor. Slack
delivers the same message more than once (an envelope redelivered after a reconnection, an HTTP retry
with ``X-Slack-Retry-Num``, ``app_mention`` and ``message`` for one mention, a catch-up reading back
what had arrived): every copy carries the message's ``ts`` as its id, and the inbox keeps the first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import parse_qs

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

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
    SendRate,
    SinkRetry,
    SinkUnavailable,
    WebhookReply,
)
from adapters.records import MemoryRecordStore, RecordStore
from resilience.backoff import Backoff
from resilience.cancelling import cancel_and_wait
from resilience.loops import BackgroundLoop

from . import catchup, files
from .errors import delivery_error, error_code
from .home import home_view
from .inbound import COMMAND_PREFIX, BotIdentity, command_to_inbound, is_from_person, plain_text, to_inbound
from .render import render_slack
from .settings import PLATFORM, RECORDS, SLACK_API, WEBHOOK_PATH, SlackSettings
from .socket import SDK_LOGGER, ReportingSocketModeClient

log = logging.getLogger(__name__)

T = TypeVar("T")
REQUEST_TIMEOUT = 10  # seconds, every Web API call (slack_sdk's own timeout)
UPLOAD_TIMEOUT = 120  # seconds, a file upload
MAX_UPLOAD_BYTES = 1024 * 1024 * 1024  # Slack takes files of up to 1 GB
COMMAND_LIFETIME = 30 * 60  # seconds a slash command's response_url accepts answers
EPHEMERAL_PREFIX = "ephemeral:"
USER_NAMES_KEPT = 10_000
SINK_BACKOFF = Backoff(0.5, 30.0)
RESPONSE_TIMEOUT = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)


@dataclass(frozen=True)
class _CatchUp:
    """Queued after a connection opened: read back what may have been missed before it."""

    replaced: bool
    since: float | None  # when this process's previous connection opened (None: its first one)
    opened: float  # when this connection opened


class SlackAdapter(Adapter):
    """Slack through slack_sdk's ``AsyncWebClient`` and Socket Mode client (see the module docstring).

    ``app_token`` (xapp-…): Socket Mode, one connection per app: several processes start with
    ``receive=False`` and the elected one receives. ``signing_secret``: the Events API, whose POSTs
    any process takes (:meth:`receive_webhook`). Either or both.
    """

    platform = PLATFORM
    webhook_path = WEBHOOK_PATH
    receive_on_demand = True
    prompt_hint = (
        "You are talking with people on Slack. Keep messages compact; simple Markdown (bold, italics, "
        "links, lists, code blocks) is converted to Slack's formatting, tables are not."
    )

    def __init__(
        self,
        token: str,
        settings: SlackSettings,
        *,
        app_token: str | None = None,
        signing_secret: str | None = None,
        records: RecordStore | None = None,
        private_commands: Collection[str] = (),
    ) -> None:
        self.capabilities = Capabilities(
            max_message_length=settings.message_limit,
            length_unit="chars",
            render=render_slack,
            can_edit=True,
            has_threads=True,
            max_file_bytes=MAX_UPLOAD_BYTES,
        )
        self._token = token
        self._settings = settings
        self._base_url = (settings.api_base or SLACK_API).rstrip("/") + "/"
        self._app_token = app_token
        self._verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self._records = records or MemoryRecordStore(RECORDS)
        self._cursors = catchup.Cursors(self._records)
        self._private = frozenset(private_commands)
        self._client: AsyncWebClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._me: BotIdentity | None = None
        self._bot_name = "Herald"
        self._sink: InboundSink | None = None
        self._socket: ReportingSocketModeClient | None = None
        self._queue: asyncio.Queue[SocketModeRequest | _CatchUp] = asyncio.Queue()
        self._consumer: BackgroundLoop | None = None
        self._turn = asyncio.Lock()  # one batch at a time reaches the sink, in arrival order
        self._retry = SinkRetry(SINK_BACKOFF, log=log)  # the socket's batches, while the store is away
        self._names: dict[str, str] = {}
        self._commands: list[CommandSpec] = []
        self._connected_at: float | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._status = AdapterStatus()

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def identity(self) -> BotIdentity | None:
        return self._me

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """``auth.test``, then (``receive``) what :meth:`start_receiving` does. Raises
        :class:`DeliveryError` (not retryable for a refused token)."""
        if self._client is not None:
            raise RuntimeError("SlackAdapter.start called twice")
        session = aiohttp.ClientSession()
        client = AsyncWebClient(
            token=self._token,
            base_url=self._base_url,
            timeout=REQUEST_TIMEOUT,
            session=session,
            logger=SDK_LOGGER,
        )
        try:
            auth = await client.auth_test()
        except BaseException as exc:
            await session.close()
            if isinstance(exc, SlackApiError) and error_code(exc) in (
                "invalid_auth",
                "not_authed",
                "account_inactive",
            ):
                raise DeliveryError(f"Slack refused SLACK_BOT_TOKEN ({error_code(exc)})") from exc
            if isinstance(exc, Exception):
                raise delivery_error(exc, "auth.test") from exc
            raise
        self._client, self._session, self._sink = client, session, sink
        self._me = BotIdentity(str(auth["user_id"]), auth.get("bot_id"), auth.get("team_id"))
        self._bot_name = str(auth.get("user") or "Herald")
        self._consumer = BackgroundLoop("the Slack inbound consumer", self._consume).start()
        self._status = AdapterStatus(connected=True, extra={"bot": f"@{self._bot_name}"})
        if receive:
            await self.start_receiving()
        modes = [m for m, on in (("Socket Mode", self._app_token), ("Events API", self._verifier)) if on]
        log.info("Slack adapter started as @%s (%s)", self._bot_name, " and ".join(modes))

    async def start_receiving(self, allowed: Callable[[], bool] | None = None) -> None:
        """Open the Socket Mode connection (nothing without an app token: Events API POSTs reach every
        process). Catches up what stored cursors say may have been missed. Raises
        :class:`DeliveryError` (not retryable when Slack refuses the app token)."""
        self._started()
        if self._socket is not None or not self._app_token:
            return
        opener = AsyncWebClient(
            base_url=self._base_url, timeout=REQUEST_TIMEOUT, session=self._session, logger=SDK_LOGGER
        )
        try:
            opened = await opener.apps_connections_open(app_token=self._app_token)
        except SlackApiError as exc:
            retryable = error_code(exc) not in ("invalid_auth", "not_authed", "not_allowed_token_type")
            raise DeliveryError(f"Slack refused SLACK_APP_TOKEN for Socket Mode ({error_code(exc)})",
                                retryable=retryable) from exc  # fmt: skip
        except Exception as exc:
            raise delivery_error(exc, "apps.connections.open") from exc
        socket = ReportingSocketModeClient(
            self._app_token,
            logger=SDK_LOGGER,
            web_client=opener,
            ping_interval=float(self._settings.ping_interval),
            on_connected=self._connected,
        )
        socket.socket_mode_request_listeners.append(self._enqueue)
        socket.wss_uri = str(opened["url"])
        self._socket = socket
        await socket.connect()
        log.info("Slack adapter receiving (Socket Mode)")

    async def stop_receiving(self) -> None:
        """Close the socket; envelopes not yet stored are left unacknowledged (Slack sends them again)."""
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()  # type: ignore[no-untyped-call]
        while not self._queue.empty():
            self._queue.get_nowait()

    async def stop(self) -> None:
        await self.stop_receiving()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()
        await cancel_and_wait(list(self._background))
        session, self._session, self._client, self._sink = self._session, None, None, None
        if session is not None:
            await session.close()
        self._status.connected = False

    def status(self) -> AdapterStatus:
        """Connected: started, and the Socket Mode connection (while this process runs one) open and
        answering pings. A process that does not receive (a cluster's worker, Events API only) is not
        judged by a socket it does not run."""
        current, socket = self._status, self._socket
        connected, detail = current.connected and self._client is not None, current.detail
        if socket is not None and not socket.up:
            failure = socket.reconnect_failure
            connected = False
            detail = "Socket Mode connection down" + (f"; reconnecting failed: {failure}" if failure else "")
        return AdapterStatus(connected=connected, detail=detail, extra=dict(current.extra))

    def send_rates(self, address: ChatAddress) -> Sequence[SendRate]:
        """``chat.postMessage``: about one message a second per channel (short bursts allowed)."""
        return (SendRate("chat", 1, 1),)

    # --- Socket Mode ----------------------------------------------------------------------------

    async def _enqueue(self, _client: object, request: SocketModeRequest) -> None:
        self._queue.put_nowait(request)  # no await before: the SDK starts listeners in arrival order

    def _connected(self, replaced: bool) -> None:
        since, self._connected_at = self._connected_at, time.time()
        self._queue.put_nowait(_CatchUp(replaced, since if replaced else None, self._connected_at))
        self._status.detail = ""

    async def _consume(self) -> None:
        """The socket's envelopes and catch-ups, one at a time, in order."""
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, _CatchUp):
                    await self._catch_up(item)
                else:
                    await self._envelope(item)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Handling a Slack Socket Mode envelope failed")

    async def _envelope(self, request: SocketModeRequest) -> None:
        payload = request.payload
        if request.type == "events_api":
            await self._hand_over(await self._from_event_payload(payload), retry=True)
        elif request.type == "slash_commands":
            await self._hand_over(await self._from_command(payload), retry=True)
        socket = self._socket
        if socket is not None:
            try:
                await socket.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
            except Exception as exc:  # the connection is going: Slack sends it again, the inbox drops it
                log.info(
                    "Acknowledging a Slack envelope failed (%s); Slack will send it again", type(exc).__name__
                )

    async def _catch_up(self, item: _CatchUp) -> None:
        client, me = self._started(), self._me
        assert me is not None
        caught, channels = 0, 0
        try:  # a channel with no cursor: from when the last connection, of any process, opened
            since = item.since if item.replaced else await self._cursors.last_connected()
            for channel in await catchup.channels_of_bot(client):
                oldest = await self._cursors.get(channel.id)
                if oldest is None and since is not None:
                    oldest = f"{since:.6f}"
                if oldest is None:
                    continue
                events = await catchup.missed(
                    client, channel, oldest, await self._cursors.threads(channel.id)
                )
                batch = [m for m in [await self._from_event(e, me.team_id) for e in events] if m is not None]
                if batch:
                    await self._hand_over(batch, retry=True)
                    caught, channels = caught + len(batch), channels + 1
        except DeliveryError as exc:  # the catch-up's Web API call that failed, by name
            log.warning("Slack catch-up after a new Socket Mode connection failed (%s); messages of the gap "
                        "may be missing", exc)  # fmt: skip
            return
        try:
            await self._cursors.connected(item.opened)
        except Exception as exc:  # an older time only means a longer catch-up next time
            log.info("Could not record when the Slack connection opened (%s)", type(exc).__name__)
        if item.replaced:
            log.warning(
                "Slack Socket Mode connection replaced (the old one stopped answering pings or was closed); "
                "caught up %d message(s) from %d channel(s)",
                caught,
                channels,
            )
        elif caught:
            log.info(
                "Slack caught up %d message(s) from %d channel(s) since the last start", caught, channels
            )

    # --- the Events API -------------------------------------------------------------------------

    async def receive_webhook(self, body: bytes, headers: Mapping[str, str]) -> WebhookReply:
        """An Events API or slash command POST: 401 for a bad or old signature (nothing else is read),
        200 once stored (Slack retries otherwise, and a retry of a stored event is a duplicate)."""
        lowered = {key.lower(): value for key, value in headers.items()}
        if self._verifier is None:
            return WebhookReply(404, b"the Events API is off: set SLACK_SIGNING_SECRET")
        timestamp, signature = (
            lowered.get("x-slack-request-timestamp", ""),
            lowered.get("x-slack-signature", ""),
        )
        if not _is_unix_time(timestamp) or not self._verifier.is_valid(body, timestamp, signature):
            log.warning("Refused a Slack POST with a bad or expired signature")
            return WebhookReply(401, b"invalid signature")
        if self._me is None:
            return WebhookReply(503, b"not started")
        try:
            if lowered.get("content-type", "").startswith("application/x-www-form-urlencoded"):
                form = {key: values[0] for key, values in parse_qs(body.decode()).items()}
                await self._hand_over(await self._from_command(form), retry=False)
                return WebhookReply(200)
            payload = json.loads(body)
            if not isinstance(payload, dict):
                return WebhookReply(400, b"not an Events API payload")
            if payload.get("type") == "url_verification":
                return WebhookReply(200, str(payload.get("challenge", "")).encode())
            await self._hand_over(await self._from_event_payload(payload), retry=False)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return WebhookReply(400, b"the body is not JSON or a form")
        except SinkUnavailable as exc:
            log.warning("Could not store a Slack event (%s); answering 503 so Slack retries", exc)
            return WebhookReply(503)
        except Exception:
            log.exception("Storing a Slack event failed; answering 500 so Slack retries")
            return WebhookReply(500)
        return WebhookReply(200)

    # --- inbound --------------------------------------------------------------------------------

    async def _from_event_payload(self, payload: Mapping[str, Any]) -> list[InboundMessage]:
        event = payload.get("event")
        if payload.get("type") != "event_callback" or not isinstance(event, dict):
            return []
        if event.get("type") == "app_home_opened" and event.get("tab") == "home":
            self._in_background(self._publish_home(str(event.get("user") or "")))
            return []
        team = payload.get("team_id")
        message = await self._from_event(event, str(team) if team else None)
        return [message] if message is not None else []

    async def _from_event(self, event: Mapping[str, Any], team: str | None) -> InboundMessage | None:
        me = self._me
        if me is None or not is_from_person(event, me):
            return None
        name = await self._user_name(str(event["user"]))
        message = to_inbound(event, me, user_name=name, team_id=team or me.team_id)
        if message is not None and message.addressed and message.thread_id not in (None, message.message_id):
            context = await self._thread_context(message)
            if context:
                message = _with_text(message, f"{context}\n\n{message.text}")
        return message

    async def _from_command(self, payload: Mapping[str, Any]) -> list[InboundMessage]:
        user = str(payload.get("user_id") or "")
        name = str(payload.get("user_name") or "") or await self._user_name(user)
        message = command_to_inbound(payload, slash_command=self._settings.slash_command, user_name=name)
        if message is None:
            return []
        command = message.text[1:].split(" ", 1)[0]
        await self._records.add(
            message.message_id,
            {"response_url": str(payload.get("response_url") or ""), "private": command in self._private},
            expires_at=time.time() + COMMAND_LIFETIME,
        )
        return [message]

    async def _hand_over(self, batch: list[InboundMessage], *, retry: bool) -> None:
        """The sink stores ``batch``; then the cursors advance. ``retry``: wait out an unavailable
        database (the socket's consumer; any other failure loses the batch, logged) instead of raising (a
        POST: Slack retries it)."""
        sink = self._sink
        if not batch or sink is None:
            return
        async with self._turn:
            if not retry:
                await sink(batch)
            elif not await self._retry.until_stored(lambda: sink(batch), "Slack messages"):
                return  # lost (logged): no cursor is moved for it
        for message in batch:
            if message.message_id.startswith(COMMAND_PREFIX):
                continue
            try:
                await self._cursors.advance(message.chat_id, message.message_id, message.thread_id)
            except Exception as exc:  # a cursor left behind only means a longer catch-up
                log.info("Could not record the Slack catch-up cursor (%s)", type(exc).__name__)

    async def _thread_context(self, message: InboundMessage) -> str:
        """The thread's earlier messages since the bot last spoke there, as lines for the model, put
        before the mention's own text (never in the system prompt: the session's prompt bytes stay).
        Empty when there are none or on failure."""
        me, client = self._me, self._client
        limit = self._settings.thread_context
        if me is None or client is None or limit <= 0 or message.thread_id is None:
            return ""
        try:
            page = await client.conversations_replies(
                channel=message.chat_id, ts=message.thread_id, latest=message.message_id, inclusive=False,
                limit=200,
            )  # fmt: skip
        except Exception as exc:
            log.info(
                "Reading the Slack thread's earlier messages failed: %s",
                delivery_error(exc, "conversations.replies"),
            )
            return ""
        earlier = [
            m
            for m in page.get("messages") or ()
            if isinstance(m, dict) and float(m.get("ts", 0)) < float(message.message_id)
        ]
        mine = [
            i
            for i, m in enumerate(earlier)
            if m.get("user") == me.user_id or (m.get("bot_id") == me.bot_id and me.bot_id)
        ]
        unseen = earlier[mine[-1] + 1 :] if mine else earlier
        lines = []
        for item in unseen[-limit:]:
            if f"<@{me.user_id}" in str(item.get("text") or ""):
                continue  # asked of the bot before: its session has it
            who = await self._user_name(str(item.get("user") or "")) if item.get("user") else "a bot"
            lines.append(f"{who}: {plain_text(str(item.get('text') or ''), me.user_id)}")
        if not lines:
            return ""
        return "(Earlier in this thread:\n" + "\n".join(lines) + "\n)"

    async def _user_name(self, user: str) -> str:
        if user in self._names:
            return self._names[user]
        name = user
        client = self._client
        if client is not None and user:
            try:
                info = (await client.users_info(user=user)).get("user") or {}
                profile = info.get("profile") or {}
                name = str(profile.get("display_name") or info.get("real_name") or info.get("name") or user)
            except Exception as exc:
                log.info("Looking up Slack user %s failed: %s", user, type(exc).__name__)
                return user
        if len(self._names) >= USER_NAMES_KEPT:
            self._names.clear()
        self._names[user] = name
        return name

    # --- outbound -------------------------------------------------------------------------------

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """``chat.postMessage`` in the thread (``reply_broadcast`` false: a thread's answer stays in it).
        The reply to a private slash command goes to its asker only, through the command's
        ``response_url``. ``key`` is not used: Slack deduplicates no bot's post (``adapters.base``)."""
        if reply_to is not None and reply_to.startswith(COMMAND_PREFIX):
            record = await self._records.get(reply_to)
            if record is not None and record.value.get("private") and record.value.get("response_url"):
                await self._respond(
                    str(record.value["response_url"]), {"response_type": "ephemeral", "text": text.text}
                )
                return f"{EPHEMERAL_PREFIX}{reply_to}"
        client = self._started()
        response = await self._call(
            "chat.postMessage",
            client.chat_postMessage(
                channel=address.chat_id, text=text.text, thread_ts=address.thread_id,
                reply_broadcast=False if address.thread_id else None, unfurl_links=False, unfurl_media=False,
            ),
        )  # fmt: skip
        return str(response["ts"])

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        if message_id.startswith(EPHEMERAL_PREFIX):
            record = await self._records.get(message_id.removeprefix(EPHEMERAL_PREFIX))
            url = str(record.value.get("response_url") or "") if record is not None else ""
            if not url:
                raise DeliveryError("the private reply can no longer be changed", permanent=True)
            await self._respond(
                url, {"response_type": "ephemeral", "replace_original": True, "text": text.text}
            )
            return
        client = self._started()
        await self._call(
            "chat.update", client.chat_update(channel=address.chat_id, ts=message_id, text=text.text)
        )

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        if message_id.startswith(EPHEMERAL_PREFIX):
            return  # a private reply disappears on its own
        client = self._started()
        try:
            await self._call("chat.delete", client.chat_delete(channel=address.chat_id, ts=message_id))
        except DeliveryError as exc:
            if "message_not_found" not in str(exc):
                raise

    async def typing(self, address: ChatAddress) -> None:
        """Slack shows no typing indicator for bots through the Web API: nothing to do."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        session = self._session
        if session is None:
            raise DeliveryError("the Slack adapter is not running", retryable=True)
        return await files.download(session, self._token, attachment, max_bytes)

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        """``files_upload_v2`` (the v1 ``files.upload`` is retired); returns the file's id."""
        if len(file.data) > MAX_UPLOAD_BYTES:
            raise DeliveryError(f"{file.name} is over Slack's {MAX_UPLOAD_BYTES:,}-byte limit")
        client = self._started()
        response = await self._call(
            "files.completeUploadExternal",
            client.files_upload_v2(
                channel=address.chat_id, thread_ts=address.thread_id, file=file.data, filename=file.name,
                title=file.name, request_file_info=False,
            ),
            limit=UPLOAD_TIMEOUT,
        )  # fmt: skip
        uploaded = response.get("files") or [{}]
        return str(uploaded[0].get("id") or "")

    async def set_commands(self, commands: list[CommandSpec]) -> None:
        """Slack's slash commands are created in the app's settings, not through the API: the table is
        shown on the App Home tab, and ``/herald <command>`` runs any of them."""
        self._commands = list(commands)

    async def _publish_home(self, user: str) -> None:
        client = self._client
        if client is None or not user:
            return
        view = home_view(self._bot_name, self._settings.slash_command, self._commands)
        try:
            await client.views_publish(user_id=user, view=view)
        except Exception as exc:
            log.info("Publishing the Slack App Home failed: %s", delivery_error(exc, "views.publish"))

    # --- helpers --------------------------------------------------------------------------------

    async def _call(self, method: str, request: Awaitable[T], *, limit: float = REQUEST_TIMEOUT + 5) -> T:
        try:
            async with asyncio.timeout(limit):
                return await request
        except (asyncio.CancelledError, DeliveryError):
            raise
        except Exception as exc:
            raise delivery_error(exc, method) from exc

    async def _respond(self, url: str, body: dict[str, Any]) -> None:
        session = self._session
        if session is None:
            raise DeliveryError("the Slack adapter is not running", retryable=True)
        try:
            async with session.post(url, json=body, timeout=RESPONSE_TIMEOUT) as response:
                if response.status == 429:
                    wait = float(response.headers.get("Retry-After", "1"))
                    raise DeliveryError("Slack response_url rate limited", retryable=True, retry_after=wait)
                if response.status >= 400:
                    status = response.status
                    raise DeliveryError(
                        f"Slack response_url refused the reply (HTTP {status})",
                        retryable=status >= 500,
                        permanent=status == 404,
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"Slack response_url failed: {type(exc).__name__}", retryable=True) from exc

    def _in_background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _started(self) -> AsyncWebClient:
        if self._client is None:
            raise DeliveryError("the Slack adapter is not running", retryable=True)
        return self._client


def _with_text(message: InboundMessage, text: str) -> InboundMessage:
    return replace(message, text=text)


def _is_unix_time(timestamp: str) -> bool:
    """Whether ``X-Slack-Request-Timestamp`` is what Slack sends (whole seconds, ASCII digits): anything
    else is refused as unsigned before slack_sdk's ``int()`` of it could raise."""
    return timestamp.isascii() and timestamp.isdigit()
