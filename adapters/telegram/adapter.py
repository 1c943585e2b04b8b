"""``TelegramAdapter``: lifecycle, the inbound path (polling or webhook) and outbound operations.

Conversion is in ``inbound``/``outbound``, error typing in ``errors``, the offset discipline in
``polling``, pacing in ``ratelimit``; this module wires them to one ``ExtBot``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from telegram import BotCommand, InputFile, Update
from telegram.constants import ChatAction
from telegram.error import BadRequest, TelegramError
from telegram.ext import ExtBot
from telegram.request import HTTPXRequest

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
from resilience.loops import BackgroundLoop

from .errors import DELETE_NOT_FOUND, NOT_MODIFIED, delivery_error, is_bad_request
from .inbound import PRESS_PREFIX, BotIdentity, press_id, press_to_inbound, to_inbound
from .outbound import (
    NO_LINK_PREVIEW,
    chat_id,
    inline_keyboard,
    message_entities,
    reply_parameters,
    thread_id,
)
from .polling import ALLOWED_UPDATES, Poller
from .ratelimit import BoundedRateLimiter, telegram_rates
from .redaction import TokenFilter, describe, redact
from .render import render_telegram
from .settings import PLATFORM, TELEGRAM_API, WEBHOOK_PATH
from .webhook import SECRET_HEADER, parse_update, secret_matches, webhook_secret

log = logging.getLogger(__name__)

Mode = Literal["polling", "webhook"]
TELEGRAM_FILES = "https://api.telegram.org/file/bot"
# Every Bot API request is bounded; getUpdates waits its long-poll timeout on top of READ_TIMEOUT.
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 10.0
WRITE_TIMEOUT = 10.0
POOL_TIMEOUT = 5.0
DOWNLOAD_TIMEOUT = 120.0  # a 20 MB file over a slow link
UPLOAD_TIMEOUT = 120.0  # sending a file of up to MAX_UPLOAD_BYTES (a voice note is a few hundred kB)
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # the largest file the Bot API takes from a bot
VOICE_FILE_NAME = "answer.ogg"
TOO_BIG_TO_DOWNLOAD = "it is larger than the 20 MB Telegram lets bots download"  # getFile: "file is too big"
# Connections to the Bot API for everything but getUpdates. httpcore looks at every pooled connection on
# every request (is it idle, has it expired): with 64 a burst of 150 messages cost ~40% more CPU than
# with 16 (benchmarks/gateway.py), and 16 requests in flight at ~0.1 s each is far more than the ~30
# messages/s Telegram allows a bot.
BOT_API_CONNECTIONS = 16
IN_FLIGHT_GRACE = 5.0  # seconds stop() waits for requests whose callers stopped waiting
T = TypeVar("T")
PRESS_NOTE_LIMIT = 200  # characters of answerCallbackQuery's text


class TelegramAdapter(Adapter):
    """Telegram through python-telegram-bot's ``ExtBot``, without its ``Application``/``Updater``.

    ``mode="polling"``: a ``getUpdates`` loop that confirms only what the sink stored (one caller
    per token: several processes start with ``receive=False`` and the elected one polls).
    ``mode="webhook"``: Telegram POSTs to ``webhook_url``; the gateway's HTTP server passes each
    request to :meth:`handle_webhook` (any process may take them; ``start_receiving`` sets the
    webhook). ``flood_retries``/``max_flood_wait``: how often
    and how long a send waits out a 429 itself before reporting it. ``retry_base``/``retry_cap``:
    the polling loop's backoff in seconds.
    """

    platform = PLATFORM
    webhook_path = WEBHOOK_PATH
    receive_on_demand = True
    prompt_hint = (
        "You are talking with the user on Telegram. Keep messages compact; simple Markdown is converted "
        "for display."
    )
    capabilities = Capabilities(
        max_message_length=4096,
        length_unit="utf16",
        render=render_telegram,
        can_edit=True,
        has_threads=True,
        voice_notes=True,
        max_file_bytes=MAX_UPLOAD_BYTES,
        buttons=True,
    )

    def __init__(
        self,
        token: str,
        *,
        base_url: str | None = None,
        base_file_url: str | None = None,
        mode: Mode = "polling",
        webhook_url: str | None = None,
        poll_timeout: float = 30.0,
        flood_retries: int = 2,
        max_flood_wait: float = 30.0,
        retry_base: float = 1.0,
        retry_cap: float = 30.0,
    ) -> None:
        if mode not in ("polling", "webhook"):
            raise ValueError(f"mode must be 'polling' or 'webhook', not {mode!r}")
        if mode == "webhook" and not webhook_url:
            raise ValueError("webhook mode needs webhook_url (the public URL Telegram posts to)")
        if poll_timeout < 0 or retry_base <= 0 or retry_cap < retry_base:
            raise ValueError("poll_timeout must be >= 0 and 0 < retry_base <= retry_cap")
        self._token = token
        self._base_url = base_url or TELEGRAM_API
        self._base_file_url = base_file_url or files_url(self._base_url)
        self.mode: Mode = mode
        self._webhook_url = webhook_url
        self._poll_timeout = poll_timeout
        self._flood_retries = flood_retries
        self._max_flood_wait = max_flood_wait
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._bot: ExtBot[int] | None = None
        self._me: BotIdentity | None = None
        self._sink: InboundSink | None = None
        self._poller: BackgroundLoop | None = None
        self._polling_request = _request(pool_size=1)  # getUpdates' own HTTP client (see stop_receiving)
        self._receiving = False  # polling, or the webhook was set by this process
        self._webhook_turn = asyncio.Lock()  # webhook POSTs reach the sink one at a time, like polling
        self._status = AdapterStatus()  # the bot's: getMe answered (until stop)
        self._polling = AdapterStatus()  # the running poller's: its last getUpdates (see status())
        self._log_filter = TokenFilter(token)
        self._in_flight: set[asyncio.Future[Any]] = set()  # requests whose caller stopped waiting

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def webhook_secret(self) -> str:
        """The ``secret_token`` given to ``setWebhook``, derived from the token (stable across restarts)."""
        return webhook_secret(self._token)

    @property
    def identity(self) -> BotIdentity | None:
        """The bot's id and username once started."""
        return self._me

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """``getMe``, then (``receive``) what :meth:`start_receiving` does.

        Raises :class:`DeliveryError` when Telegram refuses (``retryable`` when it could not be
        reached; a bad token is not retryable).
        """
        if self._bot is not None:
            raise RuntimeError("TelegramAdapter.start called twice")
        self._log_filter.attach()  # before the bot exists: its constructor logs its URL
        bot = self._build_bot()
        try:
            await bot.initialize()  # getMe
            if receive:
                await self._ask_for_updates(bot)
        except BaseException as exc:  # cancelled too: never leave the HTTP clients open
            await _quietly_shut_down(bot, self._token)
            self._log_filter.detach()
            if isinstance(exc, TelegramError):
                raise delivery_error(exc, "start", self._token) from exc
            raise
        self._bot, self._sink = bot, sink
        self._me = BotIdentity(bot.id, bot.username)
        self._status = AdapterStatus(connected=True, extra={"bot": f"@{bot.username}", "mode": self.mode})
        if receive:
            self._begin_receiving(bot)
        if self.mode == "polling":
            log.info("Telegram adapter started as @%s, %s", bot.username, "polling" if receive else "sending")
        else:
            url = redact(self._webhook_url or "", self._token)
            log.info("Telegram adapter started as @%s, webhook %s", bot.username, url)

    async def start_receiving(self, allowed: Callable[[], bool] | None = None) -> None:
        """Polling: ``deleteWebhook`` (``getUpdates`` is refused while one is set), then the polling
        task. Webhook: ``setWebhook`` (POSTs are accepted from ``start`` on, on every process, whether
        or not this was called). Nothing when already receiving. Raises :class:`DeliveryError`."""
        bot = self._started()
        if self._receiving:
            return
        with self._typed_errors("deleteWebhook" if self.mode == "polling" else "setWebhook"):
            await self._to_the_end(self._ask_for_updates(bot))
        await self._polling_request.initialize()  # a client stop_receiving closed is opened again
        self._begin_receiving(bot, allowed)
        log.info("Telegram adapter receiving (%s)", self.mode)

    async def stop_receiving(self) -> None:
        """Stop polling (nothing unstored is confirmed) but keep the bot for sending queued replies. A
        webhook stays set (and POSTs are still answered): Telegram holds what it cannot deliver.

        The long poll's connection is closed before this returns (its HTTP client is closed, and opened
        again by :meth:`start_receiving`), so the next poller (another process of the cluster) is the
        only one Telegram sees. Cancelling the poll alone does not promise that: httpcore can keep the
        connection of a request cancelled mid-flight (encode/httpcore#1093), and in a pool of one that
        would also be the next term's only connection."""
        self._receiving = False
        poller, self._poller = self._poller, None
        if poller is not None:
            await poller.stop()
            await self._polling_request.shutdown()

    async def stop(self) -> None:
        """Cancel polling wherever it is (a sink call included): nothing unstored is confirmed.

        No final ``getUpdates`` (PTB's Updater makes one to mark everything fetched as read). A
        webhook stays set: Telegram keeps what arrives meanwhile and redelivers it after a restart.
        """
        await self.stop_receiving()
        if self._in_flight:
            await asyncio.wait(self._in_flight, timeout=IN_FLIGHT_GRACE)
        bot, self._bot, self._sink = self._bot, None, None
        self._status.connected = False
        if bot is not None:
            await _quietly_shut_down(bot, self._token)
        self._log_filter.detach()

    def send_rates(self, address: ChatAddress) -> Sequence[SendRate]:
        return telegram_rates(address.chat_id)

    async def _ask_for_updates(self, bot: ExtBot[int]) -> None:
        if self.mode == "polling":
            await bot.delete_webhook()  # getUpdates is refused while a webhook is set
        else:
            assert self._webhook_url is not None  # checked in __init__
            await bot.set_webhook(
                self._webhook_url, secret_token=self.webhook_secret, allowed_updates=ALLOWED_UPDATES
            )

    def _begin_receiving(self, bot: ExtBot[int], allowed: Callable[[], bool] | None = None) -> None:
        self._receiving = True
        if self.mode != "polling":
            return
        self._polling = AdapterStatus(connected=True)  # a new poller starts with no failure of its own
        poller = Poller(
            bot,
            self._accept_batch,
            self._polling,
            token=self._token,
            poll_timeout=self._poll_timeout,
            retry_base=self._retry_base,
            retry_cap=self._retry_cap,
            allowed=allowed,
        )
        self._poller = BackgroundLoop("Telegram polling", poller.run).start()

    def status(self) -> AdapterStatus:
        """Connected: started, and the poller (while this process runs one) got its last ``getUpdates``
        answered. A process that does not poll (a cluster's worker, a leader that stepped down) is not
        judged by a poller it no longer runs."""
        current = self._status
        polling = self._polling if self._poller is not None else None
        connected = current.connected and self._bot is not None and (polling is None or polling.connected)
        detail = polling.detail if polling is not None else current.detail
        return AdapterStatus(connected=connected, detail=detail, extra=dict(current.extra))

    # --- inbound --------------------------------------------------------------------------------

    async def receive_webhook(self, body: bytes, headers: Mapping[str, str]) -> WebhookReply:
        """The gateway's HTTP server hands POSTs to ``webhook_path`` here."""
        return WebhookReply(await self.handle_webhook(body, headers.get(SECRET_HEADER)))

    async def handle_webhook(self, body: bytes | dict[str, Any], secret_header: str | None) -> int:
        """Judge one webhook POST; returns the HTTP status to answer Telegram with.

        403: the secret header is wrong or missing (the sink is not touched). 400: not an update.
        503: not started in webhook mode. 500: the sink raised, so Telegram delivers it again.
        200: stored, or nothing for the bot in it.
        """
        if not secret_matches(self.webhook_secret, secret_header):
            return 403
        bot = self._bot
        if bot is None or self.mode != "webhook":
            return 503
        try:
            update = parse_update(body, bot)
        except ValueError as exc:
            log.warning("Rejected a Telegram webhook body: %s", exc)
            return 400
        async with self._webhook_turn:
            try:
                await self._accept_batch([update])
            except Exception as exc:
                text = describe(exc, self._token)
                unavailable = isinstance(exc, SinkUnavailable)  # a database that is down is no bug
                log.error("Storing Telegram update %d failed (%s); answering 500", update.update_id, text,
                          exc_info=not unavailable)  # fmt: skip
                return 500
        return 200

    async def _accept_batch(self, updates: Sequence[Update]) -> None:
        """Convert and hand to the sink in one batch; returns when stored or when there was nothing to
        store.

        Only the sink's failure propagates (the updates stay unconfirmed). A message we cannot convert
        would fail the same way on every redelivery, so it is logged and confirmed.
        """
        sink, me = self._sink, self._me
        if sink is None or me is None:
            return
        batch: list[InboundMessage] = []
        for update in updates:
            if update.message is None and update.callback_query is None:
                continue
            try:
                if update.callback_query is not None:
                    inbound = press_to_inbound(update.callback_query, me, time.time())
                else:
                    assert update.message is not None
                    inbound = to_inbound(update.message, me)
            except Exception:
                log.exception(
                    "Skipping Telegram update %d: its message could not be converted", update.update_id
                )
                continue
            if inbound is not None:
                batch.append(inbound)
        if batch:
            await sink(batch)

    # --- outbound -------------------------------------------------------------------------------

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """``sendMessage``, or the note answering a button press. ``key`` is not used: the Bot API
        deduplicates no send (``adapters.base``)."""
        bot = self._started()
        if (press := press_id(reply_to)) is not None:
            if await self._answer_press(bot, press, text):
                return f"{PRESS_PREFIX}{press}"
            reply_to = None  # too long for a press's note, or the press is too old: a message
        with self._typed_errors("sendMessage"):
            sent = await self._to_the_end(
                bot.send_message(
                    chat_id(address),
                    text.text,
                    entities=message_entities(text.entities) or None,
                    message_thread_id=thread_id(address),
                    reply_parameters=reply_parameters(reply_to),
                    link_preview_options=NO_LINK_PREVIEW,
                    reply_markup=inline_keyboard(text.buttons),
                )
            )
        return str(sent.message_id)

    async def send_voice(
        self,
        address: ChatAddress,
        voice: OutboundVoice,
        *,
        reply_to: str | None = None,
        key: str | None = None,
    ) -> str:
        """``sendVoice``: Telegram shows an OGG/Opus file as a voice message (its own waveform, the
        duration given)."""
        bot = self._started()
        with self._typed_errors("sendVoice"):
            sent = await self._to_the_end(
                bot.send_voice(
                    chat_id(address),
                    InputFile(voice.data, filename=VOICE_FILE_NAME),
                    duration=max(1, round(voice.duration)),
                    message_thread_id=thread_id(address),
                    reply_parameters=reply_parameters(reply_to),
                    write_timeout=UPLOAD_TIMEOUT,
                )
            )
        return str(sent.message_id)

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        """``sendDocument``: the file as a document (shown with its name, never recompressed)."""
        if len(file.data) > MAX_UPLOAD_BYTES:
            raise DeliveryError(f"{file.name} is over the {MAX_UPLOAD_BYTES:,}-byte limit for bots")
        bot = self._started()
        with self._typed_errors("sendDocument"):
            sent = await self._to_the_end(
                bot.send_document(
                    chat_id(address),
                    InputFile(file.data, filename=file.name, attach=True),
                    message_thread_id=thread_id(address),
                    reply_parameters=reply_parameters(reply_to),
                    write_timeout=UPLOAD_TIMEOUT,
                )
            )
        return str(sent.message_id)
    async def _answer_press(self, bot: ExtBot[int], press: str, text: OutboundText) -> bool:
        """Answer a button press with ``text`` as the note only the presser sees; False when it must be
        a message instead (longer than a note may be, or the press is too old to answer: the press is
        then answered without a note, so the button stops spinning)."""
        note = text.text if len(text.text) <= PRESS_NOTE_LIMIT else None
        try:
            await self._to_the_end(bot.answer_callback_query(press, text=note))
        except BadRequest as error:  # "query is too old": more than about 15 s ago
            log.info("A button press could not be answered (%s); replying with a message",
                     describe(error, self._token))  # fmt: skip
            return False
        except TelegramError as error:
            raise delivery_error(error, "answerCallbackQuery", self._token) from error
        return note is not None

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        bot = self._started()
        with self._typed_errors("editMessageText", success_if=NOT_MODIFIED):
            await self._to_the_end(
                bot.edit_message_text(
                    text.text,
                    chat_id=chat_id(address),
                    message_id=int(message_id),
                    entities=message_entities(text.entities) or None,
                    link_preview_options=NO_LINK_PREVIEW,
                    reply_markup=inline_keyboard(text.buttons),  # none: the buttons are removed
                )
            )

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        bot = self._started()
        with self._typed_errors("deleteMessage", success_if=DELETE_NOT_FOUND):
            await self._to_the_end(bot.delete_message(chat_id(address), int(message_id)))

    async def typing(self, address: ChatAddress) -> None:
        bot = self._bot
        if bot is None:
            return
        try:
            await self._to_the_end(
                bot.send_chat_action(
                    chat_id(address), ChatAction.TYPING, message_thread_id=thread_id(address)
                )
            )
        except Exception as exc:  # best effort by contract
            text = describe(exc, self._token)
            log.info("Telegram typing indicator for chat %s failed: %s", address.chat_id, text)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """``getFile``, then the file from Telegram's file server (bots may download up to 20 MB)."""
        bot = self._started()
        with self._typed_errors("getFile"):
            try:
                file = await self._to_the_end(bot.get_file(attachment.file_id))
            except TelegramError as exc:
                if is_bad_request(exc, "file is too big"):
                    raise DeliveryError(TOO_BIG_TO_DOWNLOAD, permanent=True) from None
                raise
            size = file.file_size or attachment.size
            if size is not None and size > max_bytes:
                raise DeliveryError(
                    f"the file is {size:,} bytes, over the {max_bytes:,}-byte limit", permanent=True
                )
            data = await self._to_the_end(file.download_as_bytearray(read_timeout=DOWNLOAD_TIMEOUT))
        if len(data) > max_bytes:
            raise DeliveryError(f"the file is over the {max_bytes:,}-byte limit", permanent=True)
        return bytes(data)

    async def set_commands(self, commands: list[CommandSpec]) -> None:
        bot = self._started()
        with self._typed_errors("setMyCommands"):
            await self._to_the_end(bot.set_my_commands([BotCommand(c.name, c.description) for c in commands]))

    # --- helpers --------------------------------------------------------------------------------

    async def _to_the_end(self, request: Awaitable[T]) -> T:
        """Run one Bot API request to its end even when the caller is cancelled (it stops waiting at
        once). httpcore can lose a pooled connection for good when a request is cancelled mid-flight
        (encode/httpcore#1093); under load the 64-connection pool ran dry and the bot could send
        nothing until restarted (``benchmarks/gateway.py`` found it). ``stop`` waits for these briefly.
        """
        task = asyncio.ensure_future(request)
        self._in_flight.add(task)
        task.add_done_callback(_settled)
        task.add_done_callback(self._in_flight.discard)
        return await asyncio.shield(task)

    def _started(self) -> ExtBot[int]:
        if self._bot is None:
            raise DeliveryError("the Telegram adapter is not running", retryable=True)
        return self._bot

    @contextmanager
    def _typed_errors(self, operation: str, *, success_if: str | None = None) -> Iterator[None]:
        """PTB errors leave as DeliveryError; a BadRequest containing ``success_if`` is success."""
        try:
            yield
        except TelegramError as exc:
            if success_if is not None and is_bad_request(exc, success_if):
                return
            raise delivery_error(exc, operation, self._token) from exc

    def _build_bot(self) -> ExtBot[int]:
        return ExtBot(
            self._token,
            base_url=self._base_url,
            base_file_url=self._base_file_url,
            request=_request(pool_size=BOT_API_CONNECTIONS),
            get_updates_request=self._polling_request,
            rate_limiter=BoundedRateLimiter(max_retries=self._flood_retries, max_wait=self._max_flood_wait),
        )


def files_url(base_url: str) -> str:
    """Where files are downloaded from: next to the Bot API (``…/bot`` → ``…/file/bot``), as on
    Telegram's servers and a local Bot API server; Telegram's own when the URL has another shape."""
    root, bot, rest = base_url.rstrip("/").rpartition("/bot")
    return f"{root}/file/bot" if bot and not rest else TELEGRAM_FILES


def _settled(task: asyncio.Future[Any]) -> None:
    """Mark a request's failure as seen: when its caller stopped waiting, nobody else reads it."""
    if not task.cancelled():
        task.exception()


def _request(pool_size: int) -> HTTPXRequest:
    return HTTPXRequest(
        connection_pool_size=pool_size,
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        write_timeout=WRITE_TIMEOUT,
        pool_timeout=POOL_TIMEOUT,
    )


async def _quietly_shut_down(bot: ExtBot[int], token: str) -> None:
    """Close the HTTP clients; a failure here must not mask what the caller is doing."""
    try:
        await bot.shutdown()
    except Exception as exc:
        log.warning("Shutting down the Telegram bot client failed: %s", describe(exc, token))
