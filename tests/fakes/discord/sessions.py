"""Gateway sessions and connections: sequence numbers, the replay buffer, ordered compressed sends.

A :class:`Session` outlives its websocket: after a drop, events keep getting sequence numbers and
go to the replay buffer, and a RESUME on a new :class:`Connection` replays everything after the
client's last ``seq``. A connection sends through one writer task fed by a queue, so frames leave
in the order they were queued, from whatever thread queued them (always with the state lock held,
which is what makes that order the sequence order).

Transport compression follows the ``compress`` query parameter: ``zlib-stream`` is one zlib
stream for the whole connection, each message flushed with ``Z_SYNC_FLUSH`` (discord.py buffers
binary frames until one ends in ``00 00 ff ff``); ``zstd-stream`` (what discord.py picks when
``zstandard`` or ``compression.zstd`` is importable) is one zstd stream, each message a flushed
block. Without ``compress`` frames are JSON text.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from .records import GatewayConnection
from .wire import dumps

HISTORY_LIMIT = 5000  # events kept per session for RESUME

# Gateway intents (https://discord.com/developers/docs/events/gateway#gateway-intents).
GUILDS = 1 << 0
GUILD_MEMBERS = 1 << 1
GUILD_PRESENCES = 1 << 8
GUILD_MESSAGES = 1 << 9
DIRECT_MESSAGES = 1 << 12
MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = {
    "members": GUILD_MEMBERS,
    "presences": GUILD_PRESENCES,
    "message_content": MESSAGE_CONTENT,
}


class Encoder(Protocol):
    def encode(self, text: str) -> bytes | str: ...


class PlainEncoder:
    def encode(self, text: str) -> bytes | str:
        return text


class ZlibStreamEncoder:
    def __init__(self) -> None:
        self._stream = zlib.compressobj()

    def encode(self, text: str) -> bytes | str:
        return self._stream.compress(text.encode()) + self._stream.flush(zlib.Z_SYNC_FLUSH)


class ZstdStreamEncoder:
    """One zstd stream per connection; the module is looked up at runtime (optional dependency)."""

    def __init__(self) -> None:
        self._flush: Any
        try:
            stdlib = importlib.import_module("compression.zstd")
        except ImportError:
            module = importlib.import_module("zstandard")
            self._stream = module.ZstdCompressor().compressobj()
            self._flush = lambda: self._stream.flush(module.COMPRESSOBJ_FLUSH_BLOCK)
            self._compress = self._stream.compress
        else:
            compressor = stdlib.ZstdCompressor()
            self._compress = lambda data: compressor.compress(data, mode=compressor.FLUSH_BLOCK)
            self._flush = lambda: b""

    def encode(self, text: str) -> bytes | str:
        return bytes(self._compress(text.encode())) + bytes(self._flush())


def zstd_available() -> bool:
    for name in ("compression.zstd", "zstandard"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
            return True
    return False


def make_encoder(compress: str | None) -> Encoder:
    """The encoder for a ``compress`` query value; ValueError when the fake cannot do it."""
    if compress is None or compress == "":
        return PlainEncoder()
    if compress == "zlib-stream":
        return ZlibStreamEncoder()
    if compress == "zstd-stream" and zstd_available():
        return ZstdStreamEncoder()
    raise ValueError(f"unsupported compress={compress!r}")


@dataclass(frozen=True)
class _Close:
    code: int
    message: str


class Connection:
    """One websocket: an outbox drained in order by :meth:`run_writer` on the server loop."""

    def __init__(
        self,
        record: GatewayConnection,
        ws: web.WebSocketResponse,
        loop: asyncio.AbstractEventLoop,
        encoder: Encoder,
    ) -> None:
        self.record = record
        self.ws = ws
        self.loop = loop
        self.encoder = encoder
        self.session: Session | None = None
        self.closing = False  # a close is queued: nothing more is sent
        self.close_code: int | None = None
        self.finished = asyncio.Event()  # set when the server stopped handling the websocket
        self._outbox: asyncio.Queue[dict[str, Any] | _Close] = asyncio.Queue()

    def send(self, frame: dict[str, Any]) -> None:
        """Queue a frame (any thread; hold the state lock to keep the order of concurrent sends)."""
        if not self.closing:
            self._put(frame)

    def close(self, code: int, message: str = "") -> None:
        """Queue a close after everything queued before it (any thread)."""
        if not self.closing:
            self.closing, self.close_code = True, code
            self._put(_Close(code, message))

    def _put(self, item: dict[str, Any] | _Close) -> None:
        with contextlib.suppress(RuntimeError):  # the server loop is already closed
            self.loop.call_soon_threadsafe(self._outbox.put_nowait, item)

    async def run_writer(self) -> None:
        while True:
            item = await self._outbox.get()
            if isinstance(item, _Close):
                await self.ws.close(code=item.code, message=item.message.encode())
                return
            data = self.encoder.encode(dumps(item))
            try:
                if isinstance(data, bytes):
                    await self.ws.send_bytes(data)
                else:
                    await self.ws.send_str(data)
            except (ConnectionError, RuntimeError):
                return  # the client went away; the reader notices and detaches


GUILD_EVENTS = frozenset({"GUILD_CREATE", "GUILD_UPDATE", "GUILD_DELETE"})  # the guild's id is "id"


@dataclass
class Session:
    """A gateway session: identified once, resumable until invalidated."""

    id: str
    intents: int
    identify: dict[str, Any] = field(repr=False)
    seq: int = 0
    connection: Connection | None = None
    resumable: bool = True
    heard: int = 0  # the last sequence number the client reported (a heartbeat's ``d``)
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY_LIMIT), repr=False)

    def push(self, event: str, data: dict[str, Any]) -> int:
        """Give ``event`` the next sequence number, keep it for RESUME, send it if connected."""
        self.seq += 1
        frame = {"op": 0, "t": event, "s": self.seq, "d": data}
        self.history.append(frame)
        if self.connection is not None:
            self.connection.send(frame)
        return self.seq

    def missed(self, after: int | None) -> list[dict[str, Any]]:
        """Frames with a sequence number above ``after`` (all of them when None)."""
        return [f for f in self.history if after is None or int(f["s"]) > after]

    def has(self, intent_bits: int) -> bool:
        return self.intents & intent_bits == intent_bits

    @property
    def shard(self) -> tuple[int, int] | None:
        """(shard id, shard count) from IDENTIFY; None for a connection without sharding."""
        shard = self.identify.get("shard")
        return (int(shard[0]), int(shard[1])) if shard else None

    def receives(self, event: str, data: dict[str, Any]) -> bool:
        """Whether ``event`` goes to this session: Discord sends a guild's events to the shard
        ``(guild_id >> 22) % shard_count`` and direct messages to shard 0."""
        shard = self.shard
        if shard is None:
            return True
        guild = data.get("id") if event in GUILD_EVENTS else data.get("guild_id")
        if guild is None:
            return shard[0] == 0
        return (int(guild) >> 22) % shard[1] == shard[0]
