"""The Redis side of the cluster's work queue: one stream, one consumer group, one consumer per process.

An entry says "chat K has lane work up to inbox id N" (fields ``kind``, ``key``, ``inbox``, ``resumed``);
the message itself is in the database already (``gateway.cluster.queue.chat_order`` says what running an
entry means). Every method is one or a few Redis commands and raises :class:`redis.exceptions.RedisError`
when Redis cannot be reached or lost the stream (the queue treats both as "Redis is down").

Entries a process has read stay in its pending list until acknowledged; the process keeps them fresh
(:meth:`WorkStream.touch`) while it holds them, so only the entries of a process that died go idle and
are claimed by another (:meth:`WorkStream.claim_idle`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.intake.work import Work, WorkKind

log = logging.getLogger(__name__)

GROUP = "workers"
READ_BLOCK_MS = 1000  # a blocking read returns at least this often (so a stopping reader is seen)
PAGE = 1000
CONSUMER_FORGET_MS = 24 * 3600 * 1000  # a consumer idle this long with nothing pending is deleted


@dataclass(frozen=True)
class Entry:
    id: str
    work: Work | None  # None: not an entry this version understands (acknowledged and dropped)


@dataclass(frozen=True)
class QueueStats:
    length: int  # entries in the stream (acknowledged ones until trimmed)
    pending: int  # read by a process and not acknowledged yet
    unread: int  # not read by any process yet
    oldest_seconds: float  # age of the oldest entry not acknowledged (0 when none)


def stream_key(prefix: str) -> str:
    return f"{prefix}:work"


def encode(work: Work) -> dict[str, str]:
    return {
        "kind": work.kind.value,
        "key": work.session_key,
        "inbox": str(work.inbox_id),
        "resumed": "1" if work.resumed else "0",
    }


def decode(fields: Any) -> Work | None:
    """The work an entry's fields describe; None for anything else (a deleted entry has no fields)."""
    try:
        kind, key, inbox_id = WorkKind(fields["kind"]), str(fields["key"]), int(fields["inbox"])
        return Work(kind, key, inbox_id, resumed=fields["resumed"] == "1")
    except (TypeError, KeyError, ValueError):
        return None


def id_tuple(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class WorkStream:
    def __init__(self, redis: Redis, *, prefix: str, consumer: str) -> None:
        self.redis = redis
        self.key = stream_key(prefix)
        self.consumer = consumer
        self._claim_cursor = "0-0"

    async def ensure_group(self) -> bool:
        """Create the stream and its group when missing (Redis was empty); True when it created them.
        The group starts at the beginning, so entries added before it existed are read too."""
        try:
            await self.redis.xgroup_create(self.key, GROUP, id="0", mkstream=True)
        except ResponseError as error:
            if "BUSYGROUP" in str(error):
                return False
            raise
        return True

    async def add(self, items: Sequence[Work]) -> None:
        """Append one entry per item, in order (one round trip)."""
        if not items:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for work in items:
                pipe.xadd(self.key, encode(work))  # type: ignore[arg-type]
            await pipe.execute()

    async def read(self, count: int, *, block_ms: int = READ_BLOCK_MS) -> list[Entry]:
        """Up to ``count`` entries no process has read yet, waiting up to ``block_ms`` for one."""
        return self._entries(
            await self.redis.xreadgroup(GROUP, self.consumer, {self.key: ">"}, count=count, block=block_ms)
        )

    async def read_own(self, count: int) -> list[Entry]:
        """Entries this consumer read before and never acknowledged (a restart under a fixed
        ``cluster.instance_id``)."""
        return self._entries(await self.redis.xreadgroup(GROUP, self.consumer, {self.key: "0"}, count=count))

    async def claim_idle(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Take over up to ``count`` entries idle for ``min_idle_ms`` (their process stopped keeping them:
        it died or hung). One step of a scan over the pending list, continued at the next call."""
        reply = await self.redis.xautoclaim(
            self.key, GROUP, self.consumer, min_idle_ms, start_id=self._claim_cursor, count=count
        )
        self._claim_cursor = str(reply[0])
        return [Entry(entry_id, decode(fields)) for entry_id, fields in reply[1]]

    async def touch(self, ids: Iterable[str]) -> None:
        """Reset the idle time of entries this process holds, so nobody claims them while they run."""
        held: list[Any] = list(ids)
        for start in range(0, len(held), PAGE):
            page = held[start : start + PAGE]
            await self.redis.xclaim(self.key, GROUP, self.consumer, 0, page, justid=True)

    async def ack(self, ids: Sequence[str]) -> None:
        if ids:
            await self.redis.xack(self.key, GROUP, *ids)

    async def queued_inbox_ids(self) -> set[int]:
        """Inbox ids named by the entries in the stream now (acknowledged ones until trimmed)."""
        found: set[int] = set()
        start = "-"
        while True:
            page: Any = await self.redis.xrange(self.key, start, "+", count=PAGE)
            for _entry_id, fields in page:
                work = decode(fields)
                if work is not None:
                    found.add(work.inbox_id)
            if len(page) < PAGE:
                return found
            start = "(" + page[-1][0]

    async def stats(self) -> QueueStats:
        length = int(await self.redis.xlen(self.key))
        group = await self._group()
        summary = await self.redis.xpending(self.key, GROUP)
        pending = int(summary["pending"])
        oldest = await self._oldest_unacked(group, summary)
        unread = int(group.get("lag") or 0) if group else 0
        if oldest is None:
            return QueueStats(length, pending, unread, 0.0)
        seconds, micros = await self.redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return QueueStats(length, pending, unread, max(0.0, (now_ms - id_tuple(oldest)[0]) / 1000))

    async def trim(self) -> None:
        """Drop the acknowledged entries before the oldest one still needed."""
        oldest = await self._oldest_unacked(await self._group(), await self.redis.xpending(self.key, GROUP))
        if oldest is not None:
            await self.redis.xtrim(self.key, minid=oldest, approximate=True)
        else:
            group = await self._group()
            if group and group.get("last-delivered-id"):
                await self.redis.xtrim(self.key, minid=str(group["last-delivered-id"]), approximate=True)

    async def forget_consumers(self) -> None:
        """Delete consumers of processes long gone (nothing pending, idle a day)."""
        for consumer in await self.redis.xinfo_consumers(self.key, GROUP):
            name = str(consumer["name"])
            gone = not int(consumer["pending"]) and int(consumer["idle"]) > CONSUMER_FORGET_MS
            if name != self.consumer and gone:
                await self.redis.xgroup_delconsumer(self.key, GROUP, name)

    async def _group(self) -> dict[str, Any] | None:
        for group in await self.redis.xinfo_groups(self.key):
            if group["name"] == GROUP:
                return dict(group)
        return None

    async def _oldest_unacked(self, group: dict[str, Any] | None, summary: dict[str, Any]) -> str | None:
        candidates: list[str] = []
        if int(summary["pending"]) and summary.get("min"):
            candidates.append(str(summary["min"]))
        delivered = str(group["last-delivered-id"]) if group else "0-0"
        first_unread: Any = await self.redis.xrange(self.key, "(" + delivered, "+", count=1)
        if first_unread:
            candidates.append(str(first_unread[0][0]))
        return min(candidates, key=id_tuple) if candidates else None

    def _entries(self, reply: Any) -> list[Entry]:
        entries: list[Entry] = []
        for _stream, items in reply or []:
            for entry_id, fields in items:
                entries.append(Entry(str(entry_id), decode(fields)))
        return entries
