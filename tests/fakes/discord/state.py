"""The fake's mutable state and the test-facing controls, behind one re-entrant lock.

The server may run on another thread (``serve_in_thread``) while a test injects events or reads
messages, so every read-modify-write holds :attr:`DiscordState.lock`. Gateway events go out
through :meth:`DiscordState.dispatch`, which numbers them per session and queues them on the live
connections while still holding the lock, so sequence order is send order.
"""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .records import (
    CommandSync,
    Dispatch,
    Fault,
    GatewayConnection,
    InteractionRecord,
    InteractionResponse,
    RecordedCall,
    SentMessage,
    StoredMessage,
    TypingEvent,
)
from .sessions import GUILDS, PRIVILEGED_INTENTS, Session
from .wire import MISSING_PERMISSIONS, Snowflakes
from .world import (
    BOT_ROLE_PERMISSIONS,
    DM,
    EVERYONE_PERMISSIONS,
    GUILD_TEXT,
    PRIVATE_THREAD,
    PUBLIC_THREAD,
    Channel,
    Guild,
    Member,
    Role,
    User,
    World,
)

DEFAULT_TOKEN = "FAKE.DISCORD.TOKEN"

# Application flags an unverified bot has when a privileged intent is enabled in the portal.
APP_FLAG_FOR_INTENT = {"presences": 1 << 13, "members": 1 << 15, "message_content": 1 << 19}
APP_FLAG_COMMAND_BADGE = 1 << 23


def _route_regex(pattern: str) -> re.Pattern[str]:
    """``/channels/{channel_id}/messages`` or ``/channels/*/messages`` -> a full-match regex."""
    out = []
    for part in re.split(r"(\{[^}]*\}|\*)", pattern):
        out.append("[^/]+" if part == "*" or part.startswith("{") else re.escape(part))
    return re.compile("".join(out))


def parse_route(route: str) -> tuple[str | None, re.Pattern[str] | None]:
    """``"*"``, ``"POST"``, ``"/path"`` or ``"POST /path"`` -> (method or None, path regex or None)."""
    first, _, rest = route.strip().partition(" ")
    if not rest and (first.startswith("/") or first == "*"):
        method, path = "", first
    else:
        method, path = first, rest.strip()
    return method.upper() or None, None if path in ("", "*") else _route_regex(path)


class DiscordState:
    """One bot application: its guilds, channels, users, messages, commands, interactions,
    gateway sessions, scripted faults and everything recorded."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_id: int | None = None,
        application_id: int | None = None,
        username: str = "herald",
        guild_name: str = "Herald Test Server",
        channel_name: str = "general",
        enabled_privileged_intents: Iterable[str] = ("members", "presences", "message_content"),
    ) -> None:
        self.lock = threading.RLock()
        self.snowflakes = Snowflakes()
        self.token = token
        self.bot_id = bot_id or self.snowflakes.next()
        self.application_id = application_id or self.bot_id
        self.owner_id = self.snowflakes.next()
        # What the developer portal allows: IDENTIFY asking for more closes with 4014.
        self.enabled_privileged_intents: set[str] = set(enabled_privileged_intents)
        unknown = self.enabled_privileged_intents - PRIVILEGED_INTENTS.keys()
        if unknown:
            raise ValueError(
                f"unknown privileged intents {sorted(unknown)}; use {sorted(PRIVILEGED_INTENTS)}"
            )
        self.recommended_shards = 1  # what GET /gateway/bot answers
        self.interaction_deadline = 3.0  # seconds to send the initial response
        self.heartbeat_interval_ms = 41250
        self.echo_bot_messages = True  # the bot's own messages come back as MESSAGE_CREATE, as on Discord
        # Channels whose permissions deny the bot "Send Voice Messages": a voice message there is a 403.
        self.voice_messages_denied: set[int] = set()
        self.rest_url = ""  # http://127.0.0.1:PORT/api/v10 while serving
        self.gateway_url = ""  # ws://127.0.0.1:PORT/gateway while serving
        self.base_url = ""  # http://127.0.0.1:PORT while serving (attachment URLs)

        self.world = World()
        self.world.users[self.bot_id] = User(self.bot_id, username, None, bot=True)
        self.world.users[self.owner_id] = User(self.owner_id, "owner", "Owner")
        self.messages_by_id: dict[int, StoredMessage] = {}
        self.inbound: dict[int, dict[str, Any]] = {}  # MESSAGE_CREATE payloads of injected messages
        self.interactions: dict[int, InteractionRecord] = {}
        self.registered_commands: dict[int | None, list[dict[str, Any]]] = {}
        self.command_ids: dict[tuple[int | None, str, int], int] = {}
        # (channel, author, nonce) -> (message id, time.monotonic() it was created): enforce_nonce
        self.nonces: dict[tuple[int, int, str], tuple[int, float]] = {}
        self.sessions: dict[str, Session] = {}
        self.faults: list[Fault] = []
        self.forbidden: dict[int, tuple[int, int, str | None]] = {}  # channel -> (status, code, message)
        self._calls: list[RecordedCall] = []
        self._typing: list[TypingEvent] = []
        self._command_syncs: list[CommandSync] = []
        self._interaction_responses: list[InteractionResponse] = []
        self._identify: list[dict[str, Any]] = []
        self._resumes: list[dict[str, Any]] = []
        self._presences: list[dict[str, Any]] = []
        self._dispatches: list[Dispatch] = []
        self._connections: list[GatewayConnection] = []
        self._deleted: list[int] = []

        self.guild_id = self.add_guild(guild_name)
        self.channel_id = self.add_text_channel(self.guild_id, channel_name)

    # --- building the world ------------------------------------------------------------------------

    def add_user(self, user_id: int | None = None, username: str | None = None, *, bot: bool = False) -> int:
        """Make a user known (inject helpers do this on their own); returns its id."""
        with self.lock:
            uid = user_id if user_id is not None else self.snowflakes.next()
            existing = self.world.users.get(uid)
            if existing is None:
                name = username or f"user{uid % 100000}"
                self.world.users[uid] = User(uid, name, name.title(), bot=bot)
            elif username:
                existing.username = username
            return uid

    def add_guild(self, name: str, *, guild_id: int | None = None) -> int:
        """A guild with an @everyone role, a role for the bot and the bot and owner as members.
        Added while a client is connected, it arrives as ``GUILD_CREATE``."""
        with self.lock:
            gid = guild_id or self.snowflakes.next()
            bot_role = self.snowflakes.next()
            guild = Guild(gid, name, self.owner_id)
            guild.roles[gid] = Role(gid, "@everyone", EVERYONE_PERMISSIONS)
            guild.roles[bot_role] = Role(bot_role, self.bot_user()["username"], BOT_ROLE_PERMISSIONS, 1, True)
            guild.members[self.owner_id] = Member(self.owner_id)
            guild.members[self.bot_id] = Member(self.bot_id, [bot_role])
            self.world.guilds[gid] = guild
            self.dispatch("GUILD_CREATE", self.world.guild_create_api(gid, me=self.bot_id), GUILDS)
            return gid

    def add_text_channel(self, guild_id: int, name: str, *, channel_id: int | None = None) -> int:
        with self.lock:
            guild = self.world.guilds[guild_id]
            cid = channel_id or self.snowflakes.next()
            position = sum(1 for c in guild.channel_ids if not self.world.channels[c].is_thread)
            self.world.channels[cid] = Channel(cid, GUILD_TEXT, name, guild_id, position=position)
            guild.channel_ids.append(cid)
            self.dispatch("CHANNEL_CREATE", self.world.channel_api(cid), GUILDS)
            return cid

    def add_thread(
        self, parent_id: int, name: str, *, private: bool = False, owner_id: int | None = None
    ) -> int:
        """A thread (channel type 11, or 12 when ``private``) under a text channel."""
        with self.lock:
            parent = self.world.channels[parent_id]
            if parent.type != GUILD_TEXT or parent.guild_id is None:
                raise ValueError(f"channel {parent_id} is not a guild text channel")
            tid = self.snowflakes.next()
            kind = PRIVATE_THREAD if private else PUBLIC_THREAD
            owner = owner_id or self.owner_id
            self.world.channels[tid] = Channel(tid, kind, name, parent.guild_id, parent_id, owner)
            self.world.guilds[parent.guild_id].channel_ids.append(tid)
            payload = {**self.world.channel_api(tid, me=self.bot_id), "newly_created": True}
            self.dispatch("THREAD_CREATE", payload, GUILDS)
            return tid

    def add_member(self, guild_id: int, user_id: int, username: str | None = None) -> None:
        with self.lock:
            self.add_user(user_id, username)
            self.world.guilds[guild_id].members.setdefault(user_id, Member(user_id))

    def dm_channel(self, user_id: int) -> int:
        """The DM channel between the bot and ``user_id`` (created on first use)."""
        with self.lock:
            self.add_user(user_id)
            cid = self.world.dm_channels.get(user_id)
            if cid is None:
                cid = self.snowflakes.next()
                self.world.channels[cid] = Channel(cid, DM, recipient_id=user_id)
                self.world.dm_channels[user_id] = cid
            return cid

    # --- faults ------------------------------------------------------------------------------------

    def fail_next(
        self,
        route: str = "*",
        status: int = 429,
        *,
        retry_after: float = 1.0,
        count: int = 1,
        global_: bool = False,
        code: int | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` REST requests matching ``route`` with ``status``.

        ``route`` is ``"*"`` (any), a method (``"POST"``), a path (``"/channels/{channel_id}/messages"``,
        ``"/channels/123/messages"``, ``*`` and ``{...}`` match one segment) or both
        (``"POST /channels/*/messages"``). A 429 is what discord.py retries: JSON ``retry_after``
        and ``global`` plus ``Via``, ``Retry-After`` and ``X-RateLimit-*`` headers. 403 defaults to
        ``Missing Permissions`` (50013); 500/502/504 are retried by discord.py after 1 s, 3 s, ...
        """
        self._add_fault(route, status, retry_after, count, global_, code, message, network=False)

    def fail_network_next(self, route: str = "*", count: int = 1) -> None:
        """Drop the connection without an answer on the next ``count`` matching requests
        (discord.py raises ``aiohttp.ClientError``; the request may or may not have taken effect:
        here it did not)."""
        self._add_fault(route, 0, 0.0, count, False, None, None, network=True)

    def lose_answer_next(self, route: str = "*", count: int = 1) -> None:
        """Carry out the next ``count`` matching requests, then drop the connection before the answer
        (discord.py raises ``aiohttp.ClientError``): the client cannot know that a message was created."""
        self._add_fault(route, 0, 0.0, count, False, None, None, network=True, takes_effect=True)

    def forbid_channel(
        self,
        channel_id: int,
        *,
        status: int = 403,
        code: int = MISSING_PERMISSIONS,
        message: str | None = None,
    ) -> None:
        """Every later REST call aimed at ``channel_id`` fails (default 403 Missing Permissions;
        use code 50007 for a user who does not accept DMs, 50001 for Missing Access)."""
        with self.lock:
            self.forbidden[channel_id] = (status, code, message)

    def allow_channel(self, channel_id: int) -> None:
        with self.lock:
            self.forbidden.pop(channel_id, None)

    def _add_fault(
        self,
        route: str,
        status: int,
        retry_after: float,
        count: int,
        global_: bool,
        code: int | None,
        message: str | None,
        *,
        network: bool,
        takes_effect: bool = False,
    ) -> None:
        method, path_re = parse_route(route)
        fault = Fault(
            method, path_re, status, count, retry_after, global_, code, message, network, route, takes_effect
        )
        with self.lock:
            self.faults.append(fault)

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                    return fault
            return None

    # --- observing ---------------------------------------------------------------------------------

    @property
    def calls(self) -> list[RecordedCall]:
        """Every REST request so far, in arrival order (a copy of the list)."""
        with self.lock:
            return list(self._calls)

    def calls_to(self, route: str) -> list[RecordedCall]:
        """Calls matching ``route`` (same syntax as :meth:`fail_next`, or an exact route template)."""
        method, path_re = parse_route(route)
        template = route.strip().rpartition(" ")[2]
        with self.lock:
            return [
                c
                for c in self._calls
                if (method is None or c.method == method)
                and (path_re is None or c.route == template or path_re.fullmatch(c.path) is not None)
            ]

    def messages(self, channel_id: int, *, include_deleted: bool = True) -> list[SentMessage]:
        """The bot's messages in a channel (a thread is its own channel), oldest first, as they are
        now; deleted ones are kept with ``deleted=True`` unless ``include_deleted`` is False."""
        with self.lock:
            return [
                m.snapshot()
                for _, m in sorted(self.messages_by_id.items())
                if m.channel_id == channel_id
                and m.author_id == self.bot_id
                and (include_deleted or not m.deleted)
            ]

    def message(self, message_id: int) -> SentMessage:
        """Any stored message, the bot's or a user's (KeyError when unknown)."""
        with self.lock:
            return self.messages_by_id[message_id].snapshot()

    @property
    def deleted(self) -> list[SentMessage]:
        """Every message deleted through the API, in deletion order."""
        with self.lock:
            return [self.messages_by_id[mid].snapshot() for mid in self._deleted]

    def typing(self, channel_id: int) -> int:
        """How many times the bot triggered the typing indicator in ``channel_id``."""
        with self.lock:
            return sum(1 for t in self._typing if t.channel_id == channel_id)

    @property
    def typing_events(self) -> list[TypingEvent]:
        with self.lock:
            return list(self._typing)

    @property
    def command_syncs(self) -> list[CommandSync]:
        """Every bulk overwrite (``PUT``) of commands, global and per guild, in order."""
        with self.lock:
            return list(self._command_syncs)

    def commands(self, guild_id: int | None = None) -> list[dict[str, Any]]:
        """The application commands registered now (global, or for one guild)."""
        with self.lock:
            return copy.deepcopy(self.registered_commands.get(guild_id, []))

    def interaction_responses(self, interaction_id: int | None = None) -> list[InteractionResponse]:
        """Answers to one interaction (or all), in order, rejected ones included (``ok`` False)."""
        with self.lock:
            return [
                r
                for r in self._interaction_responses
                if interaction_id is None or r.interaction_id == interaction_id
            ]

    @property
    def identify_payloads(self) -> list[dict[str, Any]]:
        """The ``d`` of every IDENTIFY (op 2), token included; ``intents`` is an int bit field."""
        with self.lock:
            return copy.deepcopy(self._identify)

    @property
    def resume_payloads(self) -> list[dict[str, Any]]:
        """The ``d`` of every RESUME (op 6): ``session_id``, ``seq``, ``token``."""
        with self.lock:
            return copy.deepcopy(self._resumes)

    @property
    def presence_updates(self) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(self._presences)

    @property
    def dispatches(self) -> list[Dispatch]:
        with self.lock:
            return list(self._dispatches)

    @property
    def connections(self) -> list[GatewayConnection]:
        """Every gateway websocket, oldest first (live records: read fields under ``fake.lock``
        or through :meth:`wait_for`)."""
        with self.lock:
            return list(self._connections)

    def shard_overlaps(self) -> list[tuple[int, int]]:
        """Pairs of connection ids that were identified (or resumed) as the same shard and open at the
        same time: two processes receiving one shard (a connection without sharding is shard 0 of 1)."""
        with self.lock:
            live = [c for c in self._connections if c.op is not None]
            pairs: list[tuple[int, int]] = []
            for index, first in enumerate(live):
                for second in live[index + 1 :]:
                    same = (first.shard or (0, 1)) == (second.shard or (0, 1))
                    end = first.closed if first.closed is not None else float("inf")
                    if same and second.opened < end:
                        pairs.append((first.id, second.id))
            return pairs

    def live_shards(self) -> list[tuple[int, int]]:
        """The (shard id, shard count) of every connected session; (0, 1) for one without sharding."""
        with self.lock:
            return sorted((s.shard or (0, 1)) for s in self.sessions.values() if s.connection is not None)

    def live_sessions(self) -> list[str]:
        """Ids of sessions with a connected websocket."""
        with self.lock:
            return [s.id for s in self.sessions.values() if s.connection is not None]

    def requested_intents(self) -> int | None:
        """The intents of the last IDENTIFY (None before any)."""
        with self.lock:
            return int(self._identify[-1].get("intents", 0)) if self._identify else None

    def describe(self, last_calls: int = 15) -> str:
        """A summary of recent activity, for failure messages."""
        with self.lock:
            lines = [f"last {min(last_calls, len(self._calls))} of {len(self._calls)} REST calls:"]
            for call in self._calls[-last_calls:]:
                body = "" if call.json is None else repr(call.json)[:140]
                lines.append(f"  {call.method} {call.path} -> {call.status} {body}")
            lines.append("gateway connections:")
            for conn in self._connections[-5:]:
                lines.append(
                    f"  #{conn.id} {conn.path} op={conn.op} session={conn.session_id} "
                    f"closed={conn.close_code} by {conn.closed_by}"
                )
            for session in self.sessions.values():
                state = "connected" if session.connection is not None else "disconnected"
                lines.append(
                    f"  session {session.id}: seq={session.seq} {state} resumable={session.resumable}"
                )
            lines.append("last dispatches:")
            for d in self._dispatches[-8:]:
                lines.append(f"  {d.event} -> {list(d.sessions) or 'no session (nobody connected)'}")
            bot = [m for m in self.messages_by_id.values() if m.author_id == self.bot_id][-5:]
            for m in bot:
                flag = " (deleted)" if m.deleted else ""
                lines.append(f"  channel {m.channel_id} #{m.id}: {m.content[:80]!r}{flag}")
            return "\n".join(lines)

    # --- used by the handlers and the gateway (lock held) -------------------------------------------

    def bot_user(self) -> dict[str, Any]:
        return self.world.user_api(self.bot_id)

    def application_flags(self) -> int:
        flags = APP_FLAG_COMMAND_BADGE
        for name in self.enabled_privileged_intents:
            flags |= APP_FLAG_FOR_INTENT[name]
        return flags

    def disallowed_intents(self, intents: int) -> list[str]:
        """Privileged intents requested but not enabled in the (fake) developer portal."""
        return sorted(
            name
            for name, bit in PRIVILEGED_INTENTS.items()
            if intents & bit and name not in self.enabled_privileged_intents
        )

    def record_call(self, call: RecordedCall) -> None:
        with self.lock:
            self._calls.append(call)

    def record_typing(self, channel_id: int) -> None:
        self._typing.append(TypingEvent(channel_id, time.monotonic()))

    def record_sync(self, guild_id: int | None, commands: list[dict[str, Any]]) -> None:
        self._command_syncs.append(CommandSync(guild_id, copy.deepcopy(commands), time.monotonic()))

    def record_response(self, response: InteractionResponse) -> None:
        self._interaction_responses.append(response)

    def record_identify(self, data: dict[str, Any]) -> None:
        self._identify.append(copy.deepcopy(data))

    def record_resume(self, data: dict[str, Any]) -> None:
        self._resumes.append(copy.deepcopy(data))

    def record_presence(self, data: dict[str, Any]) -> None:
        self._presences.append(copy.deepcopy(data))

    def record_connection(self, conn: GatewayConnection) -> None:
        self._connections.append(conn)

    def record_deleted(self, message_id: int) -> None:
        self._deleted.append(message_id)

    def next_connection_id(self) -> int:
        return len(self._connections) + 1

    def dispatch(
        self,
        event: str,
        data: dict[str, Any],
        intents: int = 0,
        shape: Callable[[Session, dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> Dispatch:
        """Send ``event`` to every identified session asking for ``intents`` (any of the bits;
        0: always). ``shape`` may adapt the payload per session (None: skip that session).
        Sessions that are disconnected but resumable get it in their replay buffer."""
        with self.lock:
            delivered: list[tuple[str, int]] = []
            for session in self.sessions.values():
                if not session.resumable or (intents and not session.intents & intents):
                    continue
                if not session.receives(event, data):  # another shard's guild
                    continue
                payload = copy.deepcopy(data) if shape is None else shape(session, copy.deepcopy(data))
                if payload is not None:
                    delivered.append((session.id, session.push(event, payload)))
            record = Dispatch(event, copy.deepcopy(data), tuple(delivered), time.monotonic())
            self._dispatches.append(record)
            return record
