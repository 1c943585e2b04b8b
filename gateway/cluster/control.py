"""Control across the cluster: which process runs which chat's turn, and "stop that turn".

Both are records in Redis, so that a process learns them by asking, never by having listened at the
right moment:

- ``herald:running:<key>`` = ``"<inbox id> <instance>"``: the row of chat ``key`` whose turn or command
  a process runs now. Written when the run starts, written again every ``ttl / 3`` while it runs (with a
  TTL of ``ttl``: a process that died is forgotten ``ttl`` seconds later) and deleted when it ends
  (compare-and-delete). These writes go through one queue in this process, in order (a row's end is
  never written before its start); while Redis is down they wait. ``/stop`` and ``/status`` read the
  record (:meth:`ClusterControl.running_elsewhere`): there is no view of other processes to lag behind.
- ``herald:cancel:<key>`` = ``"<inbox id>"`` (TTL ``ttl``): row ``inbox`` of chat ``key`` is to be
  stopped. :meth:`ClusterControl.cancel` writes it and publishes it on the control channel in one
  transaction and returns only once Redis took both, so ``/stop`` says "Stopped." only for a cancel that
  is recorded. The pub/sub message is the fast path; the record is what makes a cancel durable: pub/sub
  keeps nothing for a subscriber that is reconnecting (and redis-py resubscribes silently), so the
  process running a row also reads the records of the rows it runs after every subscription and at
  every tick of its queue's keeper (:meth:`ClusterControl.check`, about once a second). A cancel is
  lost only when the running process cannot reach Redis for the whole ``ttl`` after it was recorded (its
  turn then answers, as a local ``/stop`` that comes as the answer completes does). Whichever process
  runs row ``inbox`` honours the record; a later row of the chat never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.cluster.lease import COMPARE_AND_DELETE
from gateway.cluster.redis import reaching

log = logging.getLogger(__name__)

RETRY = 1.0  # seconds between attempts while Redis cannot be reached
OUTGOING_LIMIT = 10_000  # records waiting for Redis; older ones are dropped past this

OnCancel = Callable[[str, int], None]  # (session key, inbox id) to cancel in this process
RunningHere = Callable[[], Sequence[tuple[str, int]]]  # (session key, inbox id) of each row run here


@dataclass(frozen=True)
class _Write:
    """One change to the running records, written in the order it was made."""

    op: str  # "started", "finished" or "running"
    items: tuple[tuple[str, int], ...]


def channel_name(prefix: str) -> str:
    return f"{prefix}:control"


class ClusterControl:
    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str,
        instance: str,
        ttl: float,
        on_cancel: OnCancel,
        running_here: RunningHere,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.channel = channel_name(prefix)
        self.instance = instance
        self.ttl = ttl
        self.on_cancel = on_cancel
        self.running_here = running_here
        self._ttl_ms = max(1, round(ttl * 1000))
        self._outgoing: asyncio.Queue[_Write] = asyncio.Queue(OUTGOING_LIMIT)
        self._delete = redis.register_script(COMPARE_AND_DELETE)
        self.subscribed = asyncio.Event()  # set while the listener is subscribed (tests wait for it)

    def _running_key(self, key: str) -> str:
        return f"{self.prefix}:running:{key}"

    def _cancel_key(self, key: str) -> str:
        return f"{self.prefix}:cancel:{key}"

    def _running_value(self, inbox_id: int) -> str:
        return f"{inbox_id} {self.instance}"

    # --- what runs where ------------------------------------------------------------------------

    async def running_elsewhere(self, key: str) -> tuple[str, int] | None:
        """(instance, inbox id) of the turn of ``key`` another process runs now; raises
        ``RedisUnavailable`` when Redis cannot be reached."""
        with reaching(self.redis):
            value = await self.redis.get(self._running_key(key))
        if value is None:
            return None
        inbox, _, instance = str(value).partition(" ")
        if instance == self.instance or not inbox.isdigit():
            return None
        return instance, int(inbox)

    def started(self, key: str, inbox_id: int) -> None:
        self._write(_Write("started", ((key, inbox_id),)))

    def finished(self, key: str, inbox_id: int) -> None:
        self._write(_Write("finished", ((key, inbox_id),)))

    def heartbeat(self, items: Sequence[tuple[str, int]]) -> None:
        """Keep the records of the rows this process runs (they expire ``ttl`` after the last)."""
        if items:
            self._write(_Write("running", tuple(items)))

    # --- stopping a turn --------------------------------------------------------------------------

    async def cancel(self, key: str, inbox_id: int) -> None:
        """Record and announce that row ``inbox_id`` of ``key`` is to be stopped, wherever it runs;
        raises ``RedisUnavailable`` when Redis cannot be reached (then nothing was recorded)."""
        message = json.dumps({"op": "cancel", "key": key, "inbox": inbox_id}, separators=(",", ":"))
        with reaching(self.redis):
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.set(self._cancel_key(key), str(inbox_id), px=self._ttl_ms)
                pipe.publish(self.channel, message)
                await pipe.execute()

    async def check(self) -> None:
        """Stop the rows run here that a recorded cancel names (those whose message this process missed).
        Raises ``RedisError`` when Redis cannot be reached."""
        items = list(self.running_here())
        if not items:
            return
        recorded = await self.redis.mget([self._cancel_key(key) for key, _ in items])
        for (key, inbox_id), value in zip(items, recorded, strict=True):
            if value is not None and value == str(inbox_id):
                self.on_cancel(key, inbox_id)

    # --- the two tasks ----------------------------------------------------------------------------

    async def write(self) -> None:
        """Write the running records in order; while Redis is down they wait (the oldest dropped past
        :data:`OUTGOING_LIMIT`)."""
        while True:
            change = await self._outgoing.get()
            try:
                while True:
                    try:
                        await self._apply(change)
                        break
                    except RedisError:
                        await asyncio.sleep(RETRY)
            finally:
                self._outgoing.task_done()

    async def flush(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the records written so far to reach Redis (at shutdown: the rows
        this process stopped are not left looking as if they ran until their records expire)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._outgoing.join()

    async def listen(self) -> None:
        """Receive the cancels published for this process's rows; after subscribing, read the recorded
        ones (see the module)."""
        while True:
            try:
                async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel)
                    self.subscribed.set()
                    await self.check()
                    while True:
                        message = await pubsub.get_message(timeout=RETRY)
                        if message is not None and message.get("type") == "message":
                            self._receive(str(message["data"]))
            except RedisError as error:
                self.subscribed.clear()
                log.debug("control channel lost (%s); resubscribing", error)
                await asyncio.sleep(RETRY)

    async def _apply(self, change: _Write) -> None:
        if change.op == "finished":
            key, inbox_id = change.items[0]
            await self._delete(keys=[self._running_key(key)], args=[self._running_value(inbox_id)])
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for key, inbox_id in change.items:
                pipe.set(self._running_key(key), self._running_value(inbox_id), px=self._ttl_ms)
            await pipe.execute()

    def _write(self, change: _Write) -> None:
        if self._outgoing.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self._outgoing.get_nowait()
                self._outgoing.task_done()
        self._outgoing.put_nowait(change)

    def _receive(self, data: str) -> None:
        try:
            message = json.loads(data)
            op, key, inbox_id = message["op"], str(message["key"]), int(message["inbox"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a malformed control message: %.200s", data)
            return
        if op == "cancel":
            self.on_cancel(key, inbox_id)
