"""``DiscordAdapter``: lifecycle, the inbound path (gateway events) and outbound operations.

Conversion is in ``inbound``/``outbound``/``commands``, error typing in ``errors``, per-chat order
in ``ordering``, answering slash commands in ``interactions``, the discord.py client and its
process-wide settings in ``client``; this module wires them to one ``HeraldClient``.

Store before confirm, on Discord: nothing is confirmed to Discord, and a message is never delivered
again except when a RESUME replays it (same message id: the gateway's inbox deduplicates). So the
adapter hands each message to the sink in order, per chat, retrying a failing sink a few times
before giving up on that message (logged as an error: it is lost), and never lets a failure reach
discord.py's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import discord
from discord.http import handle_message_parameters

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
    SinkRetry,
)
from adapters.records import MemoryRecordStore, RecordStore
from adapters.redaction import describe
from resilience.backoff import Backoff
from resilience.unreachable import Unreachable

from .client import ClientEvents, Endpoints, HeraldClient, QuietLogs
from .commands import command_name, command_payload
from .errors import NETWORK_ERRORS, delivery_error
from .inbound import BotIdentity, interaction_to_inbound, to_inbound
from .interaction_records import RECORDS, InteractionRecord, InteractionRecords, Role
from .interactions import InteractionAnswers, InteractionWebhook, interaction_record
from .ordering import ChatQueues
from .outbound import NO_MENTIONS, REPLY_MENTIONS, button_view, channel_id, reply_reference
from .outbound import message_id as parse_message_id
from .render import render_discord
from .settings import PLATFORM
from .voice import VOICE_FLAGS, VoiceFile, plain_attachment, refused_as_voice

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0  # login + connect + READY
REQUEST_TIMEOUT = 60.0  # one outbound operation, discord.py's own 429 waits included
DOWNLOAD_TIMEOUT = 120.0  # one attachment of up to gateway.max_attachment_mb
UPLOAD_TIMEOUT = 120.0  # one file of up to MAX_UPLOAD_BYTES
MAX_UPLOAD_BYTES = 10 * 1024 * 1024  # the largest file a bot may attach in a server without boosts
CLOSE_TIMEOUT = 5.0
DEFER_TIMEOUT = 2.5  # Discord wants the first answer to an interaction within 3 s
TYPING_TIMEOUT = 5.0
MAX_RATELIMIT_WAIT = 30.0  # longer 429 waits go to the caller (discord.py's minimum setting)
# Discord's global limit: 50 requests a second per bot, whatever the route (per-route buckets come from
# response headers, which discord.py follows in each process; a 429 reaching us pauses for every process).
GLOBAL_RATE = SendRate("bot", 50, 1)
SINK_BACKOFF = Backoff(0.2, 30.0)  # Discord never redelivers: a message waits out a store that is away
SINK_TRIES = 4  # any other failure of the sink: tries in all before the message is lost (logged)
NOT_HANDLED = "Sorry, that command could not be handled. Please try again."
NOT_PRIVATELY = "I could not answer /{name} privately (Discord refused the reply); please run it again."
INTENT_HELP = (
    "Discord refused the connection: Herald asks for the Message Content intent, which this bot "
    'does not have. Enable "Message Content Intent" (Bot → Privileged Gateway Intents) for this '
    "application in the Discord developer portal (https://discord.com/developers/applications), "
    "then start again."
)


@dataclass(eq=False)
class _Shard:
    """One gateway connection: its client, the task running ``connect()``, and whether it got READY
    (from then on a fatal close is logged rather than raised to whoever connected it)."""

    client: HeraldClient
    count: int
    connect: asyncio.Task[None] | None = None
    up: bool = False


@dataclass(frozen=True)
class _Inbound:
    """A queued hand-over: the message and, for a slash command, its interaction and the deferral
    already under way (started on arrival: Discord's 3 s do not wait for the chat's queue)."""

    message: InboundMessage
    interaction: discord.Interaction[Any] | None = None
    deferral: asyncio.Task[bool] | None = None


class DiscordAdapter(Adapter):
    """Discord through discord.py 2.x: DMs, guild text channels and threads, and slash commands.

    ``api_base``/``gateway_url``: Discord's REST base (``…/api/v10``) and gateway websocket; None
    means Discord's own (see ``client.Endpoints``: these are process-wide). ``application_id``: the
    application whose commands ``set_commands`` overwrites (default: the one the token belongs to).
    ``free_response_channels``: channel ids where every message is addressed (threads follow their
    parent). ``ephemeral_commands``: command names whose answers only the invoker sees.
    ``records``: where the slash commands it took are recorded (default: in memory; give a durable
    store so that a deferred command is answered after a restart, see ``interactions``).
    ``start_timeout``, ``request_timeout``: bounds in seconds on starting and on one operation.
    ``identify_delay``, ``guild_ready_timeout``: discord.py's waits before a re-IDENTIFY and for
    the last GUILD_CREATE (tests shorten them). ``shard_count``: how many shards the bot's gateway
    connections are split into (None: Discord's recommendation, ``GET /gateway/bot``; one shard is a
    connection without sharding).

    Sending (REST) and receiving (one gateway connection per shard, each a discord.py client of its
    own) are separate: ``start(sink, receive=False)`` only logs in, and ``start_receiving`` or
    ``receive_shard``/``stop_shard`` connect shards whenever the gateway decides (a cluster spreads
    the shards over its processes; every process sends).
    """

    platform = PLATFORM
    receive_on_demand = True
    prompt_hint = (
        "You are talking with users in Discord. Messages over 2000 characters are split; prefer short "
        "paragraphs and Markdown Discord supports."
    )
    capabilities = Capabilities(
        max_message_length=2000,
        length_unit="chars",
        render=render_discord,
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
        api_base: str | None = None,
        gateway_url: str | None = None,
        application_id: str | None = None,
        free_response_channels: Collection[str] = (),
        ephemeral_commands: Collection[str] = (),
        records: RecordStore | None = None,
        start_timeout: float = START_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        identify_delay: float = 5.0,
        guild_ready_timeout: float = 2.0,
        shard_count: int | None = None,
    ) -> None:
        if not token.strip():
            raise ValueError("the Discord bot token is empty")
        if start_timeout <= 0 or request_timeout <= 0:
            raise ValueError("start_timeout and request_timeout must be positive")
        if shard_count is not None and shard_count < 1:
            raise ValueError("shard_count must be at least 1 (None: Discord's recommendation)")
        self._token = token.strip()
        self._endpoints = Endpoints(api_base, gateway_url)
        self._application_id = int(application_id) if application_id else None
        self._free_response = frozenset(str(c) for c in free_response_channels)
        self._ephemeral = frozenset(ephemeral_commands)
        self.interactions = InteractionRecords(records if records is not None else MemoryRecordStore(RECORDS))
        self._answers = InteractionAnswers(self.interactions, self._interaction_webhook)
        self._start_timeout = start_timeout
        self._request_timeout = request_timeout
        self._identify_delay = identify_delay
        self._guild_ready_timeout = guild_ready_timeout
        self._shard_count = shard_count
        self._rest: HeraldClient | None = None  # logged in, never connected: every send goes through it
        self._gateways: dict[int, _Shard] = {}  # shard id -> its gateway connection
        self._last_identify = -math.inf  # time.monotonic() of the last new gateway connection
        self._me: BotIdentity | None = None
        self._sink: InboundSink | None = None
        self._receiving = False  # handing messages to the sink
        self._up = False  # start() returned
        self._queues: ChatQueues[_Inbound] = ChatQueues(self._hand_over)
        self._deferrals: set[asyncio.Task[bool]] = set()  # referenced until done
        self._status = AdapterStatus()
        self._logs = QuietLogs(self._token)

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def identity(self) -> BotIdentity | None:
        """The bot's user id and name once started."""
        return self._me

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        """Log in for sending (REST), then (``receive``) connect the gateway: return once READY (and the
        guilds) arrived on every shard.

        Raises :class:`DeliveryError`: a refused token or a missing Message Content intent are not
        retryable (the message says what to fix); network trouble or no READY in time are.
        """
        if self._rest is not None:
            raise RuntimeError("DiscordAdapter.start called twice")
        self._logs.attach()
        self._endpoints.apply()
        rest = self._new_client(None)
        self._rest, self._sink = rest, sink
        try:
            async with asyncio.timeout(self._start_timeout):
                user = await self._log_in(rest)
            self._me = BotIdentity(user.id, user.name)
            if receive:
                await self.start_receiving()
        except BaseException as exc:  # cancelled too: never leave a client or a task behind
            await self._shut_down()
            if isinstance(exc, TimeoutError):
                raise DeliveryError(
                    f"Discord did not get ready within {self._start_timeout:g}s", retryable=True
                ) from exc
            raise
        self._up = True
        self._status.extra.update(bot=str(user))
        if not receive:
            log.info("Discord adapter started as %s (%d), sending", user, user.id)
            return
        guilds = [g for s in self._gateways.values() for g in s.client.guilds]
        names = ", ".join(sorted(g.name for g in guilds)[:10]) or "none yet"
        log.info("Discord adapter started as %s (%d) in %d guild(s): %s", user, user.id, len(guilds), names)

    async def start_receiving(self, allowed: Callable[[], bool] | None = None) -> None:
        """Connect every shard of ``shard_count`` (None: as many as Discord recommends); returns once
        each is READY. Raises :class:`DeliveryError` (then nothing is left connected). ``allowed`` is
        not asked: a gateway connection is not a request repeated (close it to stop receiving)."""
        self._started()
        count = self._shard_count or await self.recommended_shards()
        try:
            for shard_id in range(count):
                await self.receive_shard(shard_id, count)
        except BaseException:
            await self.stop_receiving()
            raise

    async def recommended_shards(self) -> int:
        """How many shards Discord recommends for this bot now (``GET /gateway/bot``)."""
        rest = self._started()
        async with self._typed_errors("get the gateway"):
            shards, _, _ = await rest.http.get_bot_gateway()
        return max(1, int(shards))

    def shards(self) -> dict[int, int]:
        """The shards whose gateway connection this adapter runs: shard id → shard count."""
        return {shard_id: shard.count for shard_id, shard in self._gateways.items()}

    async def receive_shard(self, shard_id: int, shard_count: int) -> None:
        """Connect the gateway as shard ``shard_id`` of ``shard_count`` (one of 1: no sharding) and
        return once READY; nothing when already connected so. Raises :class:`DeliveryError`."""
        if not 0 <= shard_id < shard_count:
            raise ValueError(f"shard {shard_id} is not one of {shard_count}")
        self._started()
        running = self._gateways.get(shard_id)
        if running is not None and running.count == shard_count:
            return
        if running is not None:
            await self.stop_shard(shard_id)
        if self._queues.closed:
            self._queues = ChatQueues(self._hand_over)
        await self._identify_turn()
        client = self._new_client((shard_id, shard_count) if shard_count > 1 else None)
        shard = _Shard(client, shard_count)
        self._gateways[shard_id] = shard
        self._receiving = True  # messages may arrive between READY and on_ready (which waits for guilds)
        try:
            async with asyncio.timeout(self._start_timeout):
                await self._log_in(client)
                shard.connect = asyncio.create_task(self._run(shard), name=f"discord-gateway-{shard_id}")
                await self._until_ready(client, shard.connect)
        except BaseException as exc:
            await self.stop_shard(shard_id)
            if isinstance(exc, TimeoutError):
                raise DeliveryError(
                    f"Discord shard {shard_id} did not get ready within {self._start_timeout:g}s",
                    retryable=True,
                ) from exc
            raise
        shard.up = True
        self._status.extra.update(guilds=str(self._guild_count()), shards=self._shard_text())
        if self._up:  # start() says it all in one line
            log.info(
                "Discord shard %d/%d receiving in %d guild(s)", shard_id, shard_count, len(client.guilds)
            )

    async def stop_shard(self, shard_id: int) -> None:
        """Close shard ``shard_id``'s gateway connection (bounded); sending goes on. Idempotent."""
        shard = self._gateways.pop(shard_id, None)
        if shard is None:
            return
        shard.up = False
        await self._close_client(shard.client)
        if shard.connect is not None:
            shard.connect.cancel()
            await asyncio.wait({shard.connect}, timeout=CLOSE_TIMEOUT)
            if shard.connect.done() and not shard.connect.cancelled():
                shard.connect.exception()  # retrieved: receive_shard() or _run() reported it
        self._status.extra.update(guilds=str(self._guild_count()), shards=self._shard_text())

    async def stop_receiving(self) -> None:
        """Close every gateway connection and hand nothing more to the sink (queued messages are
        dropped); keep the REST client for sends."""
        self._receiving = False
        for shard_id in list(self._gateways):
            await self.stop_shard(shard_id)
        dropped = await self._queues.close(CLOSE_TIMEOUT)
        if dropped:
            log.warning("Stopped receiving with %d Discord message(s) not handed over", dropped)

    async def stop(self) -> None:
        """Stop receiving, close the clients (bounded) and restore discord.py's endpoints. Idempotent."""
        await self.stop_receiving()
        await self._shut_down()

    def send_rates(self, address: ChatAddress) -> tuple[SendRate, ...]:
        return (GLOBAL_RATE,)

    def status(self) -> AdapterStatus:
        """Connected: logged in, and every shard this process runs is READY with its websocket open."""
        rest = self._rest
        connected = (
            rest is not None
            and not rest.is_closed()
            and all(
                s.up and s.client.is_ready() and s.client.ws is not None and s.client.ws.open
                for s in self._gateways.values()
            )
        )
        return AdapterStatus(connected=connected, detail=self._status.detail, extra=dict(self._status.extra))

    @property
    def configured_shards(self) -> int | None:
        """The shard count it was given (None: as many as Discord recommends)."""
        return self._shard_count

    @property
    def inbound_backlog(self) -> int:
        """Messages and commands received from Discord and not yet handed to the gateway (one whose
        hand-over is under way included)."""
        return self._queues.queued()

    @property
    def identify_spacing(self) -> float:
        """Seconds between two IDENTIFYs of this bot (Discord allows one per 5 s per bot): this process
        keeps to it between its own shards; a cluster spreads it over its processes."""
        return self._identify_delay

    async def _identify_turn(self) -> None:
        """Wait until ``identify_spacing`` has passed since this process's last new connection."""
        wait = self._last_identify + self._identify_delay - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last_identify = time.monotonic()

    def _new_client(self, shard: tuple[int, int] | None) -> HeraldClient:
        return HeraldClient(
            ClientEvents(self._on_message, self._on_interaction, self._on_connection),
            identify_delay=self._identify_delay,
            guild_ready_timeout=self._guild_ready_timeout,
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT,
            shard=shard,
        )

    def _guild_count(self) -> int:
        return sum(len(s.client.guilds) for s in self._gateways.values())

    def _shard_text(self) -> str:
        return ",".join(f"{i}/{s.count}" for i, s in sorted(self._gateways.items())) or "none"

    async def _log_in(self, client: HeraldClient) -> discord.ClientUser:
        """``GET /users/@me`` and the application: returns the bot's user."""
        try:
            await client.login(self._token)
        except discord.LoginFailure as exc:
            raise DeliveryError(
                "Discord refused the bot token (401): check DISCORD_BOT_TOKEN; reset it in the "
                "developer portal if it was revoked"
            ) from exc
        except (discord.HTTPException, *NETWORK_ERRORS) as exc:
            raise delivery_error(exc, "login", self._token) from exc
        if client.user is None:  # login sets it; a bug otherwise
            raise DeliveryError("Discord login returned no bot user")
        return client.user

    async def _until_ready(self, client: HeraldClient, connect: asyncio.Task[None]) -> None:
        """Wait for READY, or for ``connect()`` to fail first (then say why)."""
        ready = asyncio.create_task(client.wait_until_ready(), name="discord-ready")
        try:
            await asyncio.wait({connect, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if not connect.done():
            return
        exc = None if connect.cancelled() else connect.exception()
        if isinstance(exc, discord.PrivilegedIntentsRequired):
            raise DeliveryError(INTENT_HELP) from exc
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            raise DeliveryError(
                "Discord's gateway refused the bot token (4004): check DISCORD_BOT_TOKEN"
            ) from exc
        if exc is not None and client.ws is None:
            # No websocket ever opened. discord.py 2.7 then fails its reconnect with AttributeError
            # ('NoneType' object has no attribute 'sequence'); the real error is its context.
            cause = exc.__context__ if isinstance(exc, AttributeError) and exc.__context__ else exc
            text = describe(cause, self._token)
            raise DeliveryError(f"could not connect to Discord's gateway: {text}", retryable=True) from exc
        if exc is not None:
            raise delivery_error(exc, "gateway connect", self._token) from exc
        raise DeliveryError("the Discord gateway connection ended before READY", retryable=True)

    async def _run(self, shard: _Shard) -> None:
        """``client.connect()``: reconnects and RESUMEs are discord.py's; a fatal close is logged."""
        try:
            await shard.client.connect(reconnect=True)
        except asyncio.CancelledError:
            raise
        except discord.PrivilegedIntentsRequired:
            self._status.detail = INTENT_HELP
            if shard.up:
                log.error("%s", INTENT_HELP)
            raise
        except Exception as exc:
            self._status.detail = f"gateway stopped: {describe(exc, self._token)}"
            if shard.up:
                log.error("The Discord gateway connection stopped for good: %s", self._status.detail)
            raise

    async def _close_client(self, client: HeraldClient) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await client.close()
        except Exception as exc:
            log.warning("Closing the Discord client failed: %s", describe(exc, self._token))

    async def _shut_down(self) -> None:
        self._receiving = self._up = False
        for shard_id in list(self._gateways):
            await self.stop_shard(shard_id)
        rest, self._rest = self._rest, None
        self._sink = None
        if rest is not None:
            await self._close_client(rest)
        for deferral in list(self._deferrals):
            deferral.cancel()
        self._endpoints.restore()
        self._logs.detach()

    # --- inbound --------------------------------------------------------------------------------

    def _on_connection(self, connected: bool, what: str) -> None:
        if connected:
            if self.status().connected:  # every shard is back: the loss recorded is over
                self._status.detail = ""
            if what == "ready" and self._gateways and all(s.up for s in self._gateways.values()):
                log.info("Discord gateway identified again (a new session)")
        else:
            self._status.detail = what

    def _on_message(self, message: discord.Message) -> None:
        """Convert and queue, synchronously (order); the hand-over runs in the chat's worker."""
        me = self._me
        if not self._receiving or me is None:
            return
        try:
            inbound = to_inbound(message, me, free_response=self._free_response)
        except Exception:
            log.exception("Skipping Discord message %s: it could not be converted", message.id)
            return
        if inbound is not None:
            self._queues.submit(inbound.chat_id, _Inbound(inbound))

    def _on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        """Start deferring at once (Discord's 3 s), and queue ``/name args`` behind the chat."""
        if not self._receiving:
            return
        try:
            inbound = interaction_to_inbound(interaction)
        except Exception:
            log.exception("Skipping Discord interaction %s: it could not be converted", interaction.id)
            return
        if inbound is None:
            return
        deferral = asyncio.create_task(
            self._defer(interaction, inbound), name=f"discord-defer-{interaction.id}"
        )
        self._deferrals.add(deferral)
        deferral.add_done_callback(self._deferrals.discard)
        self._queues.submit(inbound.chat_id, _Inbound(inbound, interaction, deferral))

    async def _defer(self, interaction: discord.Interaction[Any], inbound: InboundMessage) -> bool:
        """ "Herald is thinking…": True when Discord took it (never raises)."""
        name = command_name(inbound.text)
        try:
            defer = interaction.response.defer(thinking=True, ephemeral=name in self._ephemeral)
            async with asyncio.timeout(DEFER_TIMEOUT):
                await defer
        except Exception as exc:  # too late or refused: the reply becomes a channel message
            text = describe(exc, self._token)
            log.warning("Could not defer Discord interaction %s (/%s): %s", interaction.id, name, text)
            return False
        return True

    async def _hand_over(self, item: _Inbound) -> None:
        """Record a slash command's interaction, then await the sink; on failure retry a little, then
        log the loss (and tell the invoker)."""
        message = item.message
        record: InteractionRecord | None = None
        if item.interaction is not None and item.deferral is not None:
            name = command_name(message.text)
            deferred = await item.deferral
            record = interaction_record(
                item.interaction, command=name, ephemeral=name in self._ephemeral, deferred=deferred
            )
        unrecorded = record  # recorded before the sink takes the message: its answer looks it up

        def going_on() -> bool:
            return self._sink is not None and self._receiving

        async def store() -> None:
            nonlocal unrecorded
            if unrecorded is not None:
                await self.interactions.remember(unrecorded)
                unrecorded = None
            if (sink := self._sink) is not None:  # going_on() said so just before
                await sink([message])

        retry = SinkRetry(
            SINK_BACKOFF, log=log, describe=lambda exc: describe(exc, self._token), status=self._status
        )
        what = f"Discord message {message.message_id} of chat {message.chat_id}"
        if await retry.until_stored(store, what, tries=SINK_TRIES, going_on=going_on) or not going_on():
            return  # stored, or stopped (nothing the sink did not store is confirmed)
        if record is not None and record.deferred:  # nothing answered it: fill the "thinking…" response
            with contextlib.suppress(Exception):
                apology = self._interaction_webhook(record).edit_original(NOT_HANDLED)
                async with asyncio.timeout(self._request_timeout):
                    await apology

    # --- outbound -------------------------------------------------------------------------------

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        """A channel message (``key``, a delivery key, is its enforced nonce: Discord creates one message
        however often it is sent within a few minutes, and answers the first), or the answer to a slash
        command through its interaction's webhook, which takes no nonce: its first part fills the
        deferred response (done again, still one message), a later part is a follow-up."""
        client = self._started()
        async with self._records_reached():
            record = await self.interactions.find(reply_to) if reply_to is not None else None
        if record is not None:
            async with self._typed_errors("answer interaction"):
                sent = await self._answers.answer(record, text.text)
            if sent is not None:
                return sent
            if record.ephemeral:
                return await self._not_privately(address, record)
        channel = channel_id(address)
        reference = reply_reference(reply_to, channel)
        target = client.get_partial_messageable(channel)
        nonce = enforced_nonce(key)
        async with self._typed_errors("send message"):
            if text.buttons:  # a question (an approval): never a reply, so it pings nobody
                message = await target.send(
                    text.text, allowed_mentions=NO_MENTIONS, view=button_view(text.buttons), nonce=nonce
                )
            elif reference is None:
                message = await target.send(text.text, allowed_mentions=NO_MENTIONS, nonce=nonce)
            else:  # a reply may notify the person replied to, and nobody else
                message = await target.send(
                    text.text, reference=reference, allowed_mentions=REPLY_MENTIONS, nonce=nonce
                )
        return str(message.id)

    async def send_voice(
        self,
        address: ChatAddress,
        voice: OutboundVoice,
        *,
        reply_to: str | None = None,
        key: str | None = None,
    ) -> str:
        """A voice message (``adapters.discord.voice``); where Discord refuses one, an ordinary audio
        attachment (with the same nonce: the refused one used up none). Not as the answer to a slash
        command: its answer may be private, and an interaction's webhook takes no voice message (the
        gateway sends the words instead)."""
        client = self._started()
        if reply_to is not None and await self.interactions.find(reply_to) is not None:
            raise DeliveryError("a slash command's answer is not sent as a voice message")
        channel = channel_id(address)
        reference = reply_reference(reply_to, channel)
        mentions = NO_MENTIONS if reference is None else REPLY_MENTIONS
        quoted = reference.to_message_reference_dict() if reference is not None else None
        async with self._typed_errors("send voice message"):
            try:
                with handle_message_parameters(
                    file=VoiceFile(voice), flags=VOICE_FLAGS, allowed_mentions=mentions,
                    message_reference=quoted, nonce=key,
                ) as voice_message:  # fmt: skip
                    sent = await client.http.send_message(channel, params=voice_message)
            except discord.HTTPException as error:
                if not refused_as_voice(error):
                    raise
                log.info("Discord refused a voice message in channel %s (%s); sending it as an audio file",
                         channel, describe(error, self._token))  # fmt: skip
                with handle_message_parameters(
                    file=plain_attachment(voice), allowed_mentions=mentions,
                    message_reference=quoted, nonce=key,
                ) as attachment:  # fmt: skip
                    sent = await client.http.send_message(channel, params=attachment)
        return str(sent["id"])

    async def send_file(
        self, address: ChatAddress, file: OutboundFile, *, reply_to: str | None = None
    ) -> str:
        """The file as an attachment of a message of its own in the channel (or thread)."""
        if len(file.data) > MAX_UPLOAD_BYTES:
            raise DeliveryError(f"{file.name} is over the {MAX_UPLOAD_BYTES:,}-byte limit for bots")
        client = self._started()
        channel = channel_id(address)
        reference = reply_reference(reply_to, channel)
        attachment = discord.File(io.BytesIO(file.data), filename=file.name)
        target = client.get_partial_messageable(channel)
        async with self._typed_errors("send file", seconds=UPLOAD_TIMEOUT):
            if reference is None:
                message = await target.send(file=attachment, allowed_mentions=NO_MENTIONS)
            else:
                mentions = REPLY_MENTIONS
                message = await target.send(file=attachment, reference=reference, allowed_mentions=mentions)
        return str(message.id)

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        """Replace the text (a PATCH: doing it again changes nothing, so ``key`` is not needed)."""
        client = self._started()
        async with self._records_reached():
            owner = await self.interactions.owner_of(message_id)
        if owner is not None:
            if owner.messages.get(message_id) is Role.NOTICE:
                return  # the notice stays as it is: a private answer never replaces it
            async with self._typed_errors("edit message"):
                if await self._answers.edit(owner, message_id, text.text):
                    return
            if owner.ephemeral:  # only the webhook reaches a private message
                await self._not_privately(address, owner)
                return
        async with self._typed_errors("edit message"):
            partial = client.get_partial_messageable(channel_id(address)).get_partial_message(
                parse_message_id(message_id)
            )
            view = button_view(text.buttons)  # the buttons it shows, or none (an answered question's)
            await partial.edit(content=text.text, allowed_mentions=NO_MENTIONS, view=view)

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        client = self._started()
        async with self._records_reached():
            owner = await self.interactions.owner_of(message_id)
        if owner is not None:
            if owner.messages.get(message_id) is Role.NOTICE:
                return  # the notice stays: it is all the invoker got
            async with self._typed_errors("delete message"):
                if await self._answers.delete(owner, message_id):
                    return
            if owner.ephemeral:
                return  # only the webhook reaches a private message, and its token expired
        async with self._typed_errors("delete message"):
            with contextlib.suppress(discord.NotFound):  # already gone counts as deleted
                partial = client.get_partial_messageable(channel_id(address)).get_partial_message(
                    parse_message_id(message_id)
                )
                await partial.delete()

    async def typing(self, address: ChatAddress) -> None:
        client = self._rest
        if client is None:
            return
        try:
            async with asyncio.timeout(TYPING_TIMEOUT):
                await client.http.send_typing(channel_id(address))
        except Exception as exc:  # best effort by contract
            log.info(
                "Discord typing indicator for chat %s failed: %s", address.chat_id, describe(exc, self._token)
            )

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The attachment from Discord's CDN (its ``file_id`` is the CDN URL, which expires after a day)."""
        if attachment.size is not None and attachment.size > max_bytes:
            raise DeliveryError(
                f"the file is {attachment.size:,} bytes, over the {max_bytes:,}-byte limit", permanent=True
            )
        client = self._started()
        async with self._typed_errors("download", seconds=DOWNLOAD_TIMEOUT):
            data = await client.http.get_from_cdn(attachment.file_id)
        if len(data) > max_bytes:
            raise DeliveryError(f"the file is over the {max_bytes:,}-byte limit", permanent=True)
        return data

    async def set_commands(self, commands: list[CommandSpec]) -> None:
        """Overwrite the bot's global slash commands with ``commands``: one PUT."""
        client = self._started()
        application_id = self._application_id or client.application_id
        if application_id is None:
            raise DeliveryError("the Discord application id is unknown (not logged in?)", retryable=True)
        payload = command_payload(commands)
        async with self._typed_errors("sync slash commands"):
            await client.http.bulk_upsert_global_commands(application_id, payload)
        log.info("Discord slash commands synced: %s", ", ".join(f"/{c['name']}" for c in payload) or "none")

    # --- helpers --------------------------------------------------------------------------------

    async def _not_privately(self, address: ChatAddress, record: InteractionRecord) -> str:
        """Say once, in the channel, that a private answer could not be given; every part of that
        answer then maps to this one notice (recorded as the interaction's, so edits leave it be)."""
        async with self._answers.hold(record.id):
            record = await self.interactions.find(record.id) or record
            told = record.message(Role.NOTICE)
            if told is not None:
                return told
            client = self._started()
            text = NOT_PRIVATELY.format(name=record.command)
            async with self._typed_errors("send message"):
                message = await client.get_partial_messageable(channel_id(address)).send(
                    text, allowed_mentions=NO_MENTIONS
                )
            await self.interactions.add_message(record.id, str(message.id), Role.NOTICE)
            return str(message.id)

    def _interaction_webhook(self, record: InteractionRecord) -> InteractionWebhook:
        client = self._started()
        return InteractionWebhook(client.interaction_webhook(int(record.application_id), record.token))

    def _started(self) -> HeraldClient:
        client = self._rest
        if client is None or client.is_closed():
            raise DeliveryError("the Discord adapter is not running", retryable=True)
        return client

    @asynccontextmanager
    async def _records_reached(self) -> AsyncIterator[None]:
        """Interaction records that cannot be read now make the operation one to retry later."""
        try:
            yield
        except Unreachable as exc:
            raise records_away(exc) from exc

    @asynccontextmanager
    async def _typed_errors(self, operation: str, *, seconds: float | None = None) -> AsyncIterator[None]:
        """Bounded by ``seconds`` (default ``request_timeout``); discord.py and network errors, and
        interaction records out of reach, leave as DeliveryError."""
        try:
            async with asyncio.timeout(seconds or self._request_timeout):
                yield
        except DeliveryError:
            raise
        except Unreachable as exc:
            raise records_away(exc) from exc
        except (discord.DiscordException, *NETWORK_ERRORS) as exc:
            raise delivery_error(exc, operation, self._token) from exc


def enforced_nonce(key: str | None) -> str | int:
    """A new message's nonce, which discord.py sends with ``enforce_nonce``: the delivery key, or a random
    one (what discord.py picks when given none)."""
    return key if key is not None else secrets.randbits(64)


def records_away(error: Unreachable) -> DeliveryError:
    """The interaction records cannot be read or written now: the operation is one to retry later."""
    return DeliveryError(f"the interaction records cannot be reached now: {error}", retryable=True)
