"""The discord.py side: the ``Client`` Herald runs, its intents, its endpoints and its loggers.

**Endpoints are process-wide.** discord.py reads its REST base from the class attribute
``discord.http.Route.BASE`` (used by the bot's requests and by interaction webhooks alike) and its
gateway from ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``. :class:`Endpoints` is the one
place Herald changes them (only when a URL is configured, e.g. a fake Discord in tests or
benchmarks) and puts the old values back; so one process talks to one Discord.

**Logging.** The token travels in headers and in IDENTIFY, which discord.py does not log at INFO or
above; its DEBUG lines print request bodies and gateway payloads. While the adapter runs, the
``discord`` logger is held at WARNING or above (raised if it was lower) and a token filter sits on
discord.py's module loggers as a second line of defence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import discord
import discord.gateway
import discord.http
import yarl

if TYPE_CHECKING:  # discord.types is for type checkers only (importing it at run time fails)
    from discord.types.webhook import Webhook as WebhookPayload

from adapters.redaction import TokenFilter

log = logging.getLogger(__name__)

DISCORD_LOGGERS = (
    "discord.client",
    "discord.gateway",
    "discord.http",
    "discord.state",
    "discord.shard",
    "discord.webhook.async_",
)


def herald_intents() -> discord.Intents:
    """Guilds (channels, threads), guild and DM messages, and their content (privileged: it must be
    enabled in the developer portal). No member list: display names come with each message."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


@dataclass(frozen=True)
class ClientEvents:
    """What the client reports to the adapter.

    ``message`` and ``interaction`` are synchronous on purpose: called while discord.py parses the
    gateway event, they see events in gateway order (see ``ordering``); they must not raise.
    ``connection`` gets (connected, what happened).
    """

    message: Callable[[discord.Message], None]
    interaction: Callable[[discord.Interaction[Any]], None]
    connection: Callable[[bool, str], None]


class HeraldClient(discord.Client):
    """A ``discord.Client`` that forwards what Herald needs to :class:`ClientEvents`.

    ``identify_delay``: discord.py sleeps before every IDENTIFY but the first, because Discord
    allows one per 5 seconds per bot; tests that reconnect set it to 0. ``shard``: (shard id, shard
    count) this client's gateway connection identifies as; None for a bot that needs no sharding.
    """

    def __init__(
        self,
        events: ClientEvents,
        *,
        identify_delay: float,
        guild_ready_timeout: float,
        max_ratelimit_timeout: float,
        shard: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(
            intents=herald_intents(),
            allowed_mentions=discord.AllowedMentions.none(),  # the default for anything not explicit
            guild_ready_timeout=guild_ready_timeout,
            max_ratelimit_timeout=max_ratelimit_timeout,
            chunk_guilds_at_startup=False,
            shard_id=shard[0] if shard else None,
            shard_count=shard[1] if shard else None,
        )
        self._events = events
        self._identify_delay = identify_delay

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial and self._identify_delay > 0:
            await asyncio.sleep(self._identify_delay)

    def dispatch(self, event: str, /, *args: Any, **kwargs: Any) -> None:
        """Messages and interactions are taken here, while discord.py parses the gateway event.

        ``on_message`` would run in a task of its own, later: by then discord.py may have parsed
        the following frames too (a quick edit would already have changed the cached message, an
        interaction could overtake a message). At parse time the order is the gateway's and the
        content is as created.
        """
        if event == "message" and args and isinstance(args[0], discord.Message):
            self._events.message(args[0])
        elif event == "interaction" and args and isinstance(args[0], discord.Interaction):
            self._events.interaction(args[0])
        super().dispatch(event, *args, **kwargs)

    def interaction_webhook(self, application_id: int, token: str) -> discord.Webhook:
        """The webhook that answers an interaction, from its application id and token alone: the one
        discord.py's ``Interaction.followup`` builds (an application webhook on this client's session
        and state), so an interaction this process never saw can be answered while its token lives."""
        payload: WebhookPayload = {"id": application_id, "type": 3, "token": token}
        return discord.Webhook.from_state(payload, self._connection)

    async def on_ready(self) -> None:
        self._events.connection(True, "ready")

    async def on_resumed(self) -> None:
        self._events.connection(True, "resumed")

    async def on_disconnect(self) -> None:
        self._events.connection(False, "gateway connection lost; discord.py is reconnecting")

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        """An event handler raised: log it and keep the client running."""
        log.exception("Discord event handler %s failed", event_method)


class Endpoints:
    """Points discord.py at ``api_base``/``gateway_url`` (None: leave as is) until :meth:`restore`."""

    def __init__(self, api_base: str | None, gateway_url: str | None) -> None:
        self._api_base = api_base.rstrip("/") if api_base else None
        self._gateway = yarl.URL(gateway_url) if gateway_url else None
        self._saved: tuple[str, yarl.URL] | None = None

    def apply(self) -> None:
        route, socket = discord.http.Route, discord.gateway.DiscordWebSocket
        if self._saved is None:
            self._saved = (route.BASE, socket.DEFAULT_GATEWAY)
        if self._api_base is not None:
            route.BASE = self._api_base
        if self._gateway is not None:
            socket.DEFAULT_GATEWAY = self._gateway

    def restore(self) -> None:
        """Put back what :meth:`apply` replaced, unless someone changed it again since."""
        if self._saved is None:
            return
        route, socket = discord.http.Route, discord.gateway.DiscordWebSocket
        base, gateway = self._saved
        if self._api_base is not None and self._api_base == route.BASE:
            route.BASE = base
        if self._gateway is not None and self._gateway == socket.DEFAULT_GATEWAY:
            socket.DEFAULT_GATEWAY = gateway
        self._saved = None


class QuietLogs:
    """Holds the ``discord`` logger at WARNING or above and masks the token while attached."""

    def __init__(self, token: str) -> None:
        self._filter = TokenFilter(token, DISCORD_LOGGERS)
        self._saved_level: int | None = None

    def attach(self) -> None:
        root = logging.getLogger("discord")
        if self._saved_level is None and root.getEffectiveLevel() < logging.WARNING:
            self._saved_level = root.level
            root.setLevel(logging.WARNING)
        self._filter.attach()

    def detach(self) -> None:
        self._filter.detach()
        if self._saved_level is not None:
            logging.getLogger("discord").setLevel(self._saved_level)
            self._saved_level = None
