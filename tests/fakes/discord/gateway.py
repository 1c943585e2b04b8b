"""The gateway websocket: HELLO, IDENTIFY -> READY + GUILD_CREATE, heartbeats, RESUME, closes.

``/gateway`` is the URL for a fresh connect (discord.py's ``DEFAULT_GATEWAY``), ``/resume`` the
``resume_gateway_url`` READY announces (discord.py resumes there, and re-identifies at the default
URL). Close codes are Discord's: 4001 unknown opcode, 4002 decode error, 4003 not authenticated,
4004 authentication failed, 4005 already authenticated, 4013 invalid intents, 4014 disallowed
(privileged, not enabled in the portal) intents. A RESUME of an unknown or invalidated session is
answered with op 9 INVALID_SESSION ``false``, which makes discord.py identify again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from typing import Any

from aiohttp import WSMsgType, web

from .records import GatewayConnection
from .sessions import GUILD_MEMBERS, Connection, Session, make_encoder
from .state import DiscordState

DISPATCH, HEARTBEAT, IDENTIFY, PRESENCE, VOICE_STATE, RESUME = 0, 1, 2, 3, 4, 6
RECONNECT, REQUEST_MEMBERS, INVALID_SESSION, HELLO, HEARTBEAT_ACK = 7, 8, 9, 10, 11
CLOSE_TIMEOUT = 2.0  # seconds a close waits for the client's close frame
RECONNECT_GRACE = 5.0  # after op 7/9 the fake closes the socket itself if the client did not
TRACE = ["fake-discord-gateway"]


def frame(op: int, data: Any = None) -> dict[str, Any]:
    return {"op": op, "d": data, "s": None, "t": None}


class Gateway:
    """Serves gateway websockets for a :class:`DiscordState` on the server loop."""

    def __init__(self, state: DiscordState) -> None:
        self.state = state
        self.connections: set[Connection] = set()
        self.resume_url = ""  # ws://127.0.0.1:PORT/resume while serving
        self.ack_heartbeats = True  # False: a zombie connection, as when Discord stops answering
        self.accepting = True  # False while shutting down: new websockets are closed with 1001 at once
        self._timers: set[asyncio.TimerHandle] = set()

    # --- the websocket ------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        state = self.state
        ws = web.WebSocketResponse(timeout=CLOSE_TIMEOUT, max_msg_size=0, autoping=True)
        await ws.prepare(request)
        query = dict(request.query)
        with state.lock:
            record = GatewayConnection(state.next_connection_id(), request.path, query, time.monotonic())
            state.record_connection(record)
        if not self.accepting:
            await self._refuse(ws, record, 1001, "The fake Discord is shutting down.")
            return ws
        try:
            encoder = make_encoder(query.get("compress"))
        except ValueError as exc:
            await self._refuse(ws, record, 4000, str(exc))
            return ws
        if query.get("encoding", "json") != "json":
            await self._refuse(ws, record, 4002, "the fake gateway speaks encoding=json only")
            return ws
        conn = Connection(record, ws, asyncio.get_running_loop(), encoder)
        writer = asyncio.create_task(conn.run_writer(), name=f"fake-discord-gateway-writer-{record.id}")
        self.connections.add(conn)
        with state.lock:
            conn.send(frame(HELLO, {"heartbeat_interval": state.heartbeat_interval_ms, "_trace": TRACE}))
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    self._on_text(conn, msg.data)
                elif msg.type is WSMsgType.BINARY:
                    self._on_text(conn, msg.data.decode("utf-8", "replace"))
        finally:
            with state.lock:
                self._detach(conn)
                record.closed = time.monotonic()
                if conn.closing:
                    record.closed_by, record.close_code = "fake", conn.close_code
                else:
                    record.closed_by, record.close_code = "client", ws.close_code
            try:
                if conn.closing and not writer.done():  # let our close handshake finish
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(CLOSE_TIMEOUT):
                            await asyncio.shield(writer)
            finally:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await writer
                self.connections.discard(conn)
                conn.finished.set()
        return ws

    async def _refuse(
        self, ws: web.WebSocketResponse, record: GatewayConnection, code: int, why: str
    ) -> None:
        await ws.close(code=code, message=why.encode()[:120])
        with self.state.lock:
            record.closed, record.closed_by, record.close_code = time.monotonic(), "fake", code

    def _detach(self, conn: Connection) -> None:
        session = conn.session
        if session is not None and session.connection is conn:
            session.connection = None

    # --- opcodes (server loop) ---------------------------------------------------------------------

    def _on_text(self, conn: Connection, text: str) -> None:
        try:
            payload = json.loads(text)
            op = payload["op"]
            data = payload.get("d")
        except (ValueError, KeyError, TypeError):
            conn.close(4002, "Error while decoding payload.")
            return
        with self.state.lock:
            conn.record.received_ops.append(op)
            if op == HEARTBEAT:
                if conn.session is not None and isinstance(data, int):
                    conn.session.heard = max(conn.session.heard, data)
                if self.ack_heartbeats:
                    conn.send(frame(HEARTBEAT_ACK))
            elif op == IDENTIFY:
                self._identify(conn, data if isinstance(data, dict) else {})
            elif op == RESUME:
                self._resume(conn, data if isinstance(data, dict) else {})
            elif conn.session is None:
                conn.close(4003, "Not authenticated.")
            elif op == PRESENCE:
                self.state.record_presence(data if isinstance(data, dict) else {})
            elif op == REQUEST_MEMBERS:
                self._members_chunk(conn.session, data if isinstance(data, dict) else {})
            elif op == VOICE_STATE:
                pass
            else:
                conn.close(4001, "Unknown opcode.")

    def _identify(self, conn: Connection, data: dict[str, Any]) -> None:
        state = self.state
        state.record_identify(data)
        if conn.session is not None:
            conn.close(4005, "Already authenticated.")
            return
        if data.get("token") != state.token:
            conn.close(4004, "Authentication failed.")
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or isinstance(intents, bool) or intents < 0 or intents >= 1 << 26:
            conn.close(4013, "Invalid intent(s).")
            return
        if state.disallowed_intents(intents):
            conn.close(4014, "Disallowed intent(s).")
            return
        shard = data.get("shard") or [0, 1]
        session = Session(secrets.token_hex(16), intents, data)
        state.sessions[session.id] = session
        self._attach(conn, session, "identify")
        guilds = [g for g in state.world.guilds if (g >> 22) % int(shard[1]) == int(shard[0])]
        me = state.bot_user()
        me.update(verified=True, mfa_enabled=False, flags=0, email=None)
        ready: dict[str, Any] = {
            "v": 10,
            "user": me,
            "guilds": [{"id": str(g), "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.resume_url,
            "application": {"id": str(state.application_id), "flags": state.application_flags()},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
            "_trace": TRACE,
        }
        if data.get("shard"):
            ready["shard"] = shard
        session.push("READY", ready)
        for guild_id in guilds:
            session.push("GUILD_CREATE", state.world.guild_create_api(guild_id, me=state.bot_id))

    def _resume(self, conn: Connection, data: dict[str, Any]) -> None:
        state = self.state
        state.record_resume(data)
        session = state.sessions.get(str(data.get("session_id")))
        seq = data.get("seq")
        valid = (
            session is not None
            and session.resumable
            and data.get("token") == state.token
            and (seq is None or (isinstance(seq, int) and seq <= session.seq))
        )
        if not valid or session is None:
            conn.record.op = "resume"
            conn.send(frame(INVALID_SESSION, False))
            self._close_later(conn, 4009, "Session timed out.")
            return
        old = session.connection
        if old is not None and old is not conn:
            old.close(4009, "Session resumed elsewhere.")
        self._attach(conn, session, "resume")
        for missed in session.missed(seq):
            conn.send(missed)
        session.push("RESUMED", {"_trace": TRACE})

    def _attach(self, conn: Connection, session: Session, op: str) -> None:
        session.connection = conn
        conn.session = session
        conn.record.session_id, conn.record.op = session.id, op
        conn.record.shard = session.shard

    def _members_chunk(self, session: Session, data: dict[str, Any]) -> None:
        world = self.state.world
        guild_ids = data.get("guild_id")
        for raw in guild_ids if isinstance(guild_ids, list) else [guild_ids]:
            guild = world.guilds.get(int(str(raw))) if str(raw).isdigit() else None
            if guild is None:
                continue
            wanted = {int(u) for u in data.get("user_ids") or []}
            query = str(data.get("query") or "").lower()
            members = [
                world.member_api(guild.id, uid)
                for uid in guild.members
                if (not wanted or uid in wanted) and world.users[uid].username.lower().startswith(query)
            ]
            limit = int(data.get("limit") or 0)
            chunk: dict[str, Any] = {
                "guild_id": str(guild.id),
                "members": members[:limit] if limit else members,
                "chunk_index": 0,
                "chunk_count": 1,
            }
            if data.get("nonce") is not None:
                chunk["nonce"] = data["nonce"]
            if wanted:
                chunk["not_found"] = [str(u) for u in wanted - set(guild.members)]
            if session.has(GUILD_MEMBERS) or wanted:
                session.push("GUILD_MEMBERS_CHUNK", chunk)

    def _close_later(self, conn: Connection, code: int, message: str) -> None:
        """Close ``conn`` after ``RECONNECT_GRACE`` unless the client left first (any thread)."""

        def fire(handle: list[asyncio.TimerHandle]) -> None:
            self._timers.discard(handle[0])
            conn.close(code, message)

        def arm() -> None:
            handle: list[asyncio.TimerHandle] = []
            handle.append(conn.loop.call_later(RECONNECT_GRACE, fire, handle))
            self._timers.add(handle[0])

        with contextlib.suppress(RuntimeError):  # the server loop is closed
            conn.loop.call_soon_threadsafe(arm)

    # --- test controls (any thread) -----------------------------------------------------------------

    def force_reconnect(self, *, resume: bool, code: int | None) -> int:
        """Make every connected client reconnect; returns how many connections were told to."""
        told = 0
        with self.state.lock:
            for session in list(self.state.sessions.values()):
                conn = session.connection
                if conn is None:
                    continue
                session.connection = None  # what follows goes to the replay buffer
                if not resume:
                    session.resumable = False
                if code is not None:
                    conn.close(code, "Reconnect requested by the test.")
                elif resume:
                    conn.send(frame(RECONNECT))
                    self._close_later(conn, 4000, "Reconnect requested by the test.")
                else:
                    conn.send(frame(INVALID_SESSION, False))
                    self._close_later(conn, 4009, "Session invalidated by the test.")
                told += 1
        return told

    def ask_for_heartbeats(self) -> dict[str, int]:
        """Ask every connected client for a heartbeat now (op 1, as Discord may); returns each asked
        session's last sequence number at that moment."""
        with self.state.lock:
            asked: dict[str, int] = {}
            for session in self.state.sessions.values():
                if session.connection is not None:
                    session.connection.send(frame(HEARTBEAT))
                    asked[session.id] = session.seq
            return asked

    def invalidate_sessions(self) -> None:
        """Forget every session: the next RESUME gets op 9 and the client identifies again."""
        with self.state.lock:
            for session in self.state.sessions.values():
                session.resumable = False

    async def close_all(self, code: int = 1001) -> None:
        """Close every websocket (server shutdown), each waiting at most ``CLOSE_TIMEOUT``."""
        for timer in list(self._timers):
            timer.cancel()
        self._timers.clear()
        open_connections = list(self.connections)
        with self.state.lock:
            for conn in open_connections:
                conn.close(code, "The fake Discord is shutting down.")
        if open_connections:
            with contextlib.suppress(TimeoutError):  # runner.cleanup() cancels what is left
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.gather(*(c.finished.wait() for c in open_connections))
