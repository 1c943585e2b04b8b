"""Control across the cluster: which process runs which chat's turn, and "stop that turn".

One pub/sub channel carries small JSON messages between the processes:

- ``started`` / ``finished`` (instance, key, inbox): a process began or ended running a row of a chat;
- ``running`` (instance, items): every ``ttl / 3`` seconds, each process's whole list, so a process
  that started late learns what runs, and a process that died is forgotten ``ttl`` seconds later;
- ``cancel`` (instance, key, inbox): the process ``instance`` cancels its turn of ``key`` if it is
  still running row ``inbox`` (never a later row of the chat that started meanwhile).

From these each process keeps a view of what runs elsewhere, so :meth:`ClusterControl.running_elsewhere`
answers at once (``/stop`` says "Stopped." or "Nothing is running.", ``/status`` says "answering now").
The view may lag by the time a message takes to arrive; a cancel is best effort in the same way a local
``/stop`` that arrives as the answer completes is. Pub/sub keeps nothing: while Redis is down, no
control crosses processes (and no new work starts either).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

RETRY = 1.0  # seconds between reconnection attempts of the listener
OUTGOING_LIMIT = 10_000  # control messages waiting for Redis; older ones are dropped past this

OnCancel = Callable[[str, int], None]  # (session key, inbox id) to cancel in this process


@dataclass
class _Seen:
    instance: str
    inbox_id: int
    at: float  # monotonic time it was last announced


def channel_name(prefix: str) -> str:
    return f"{prefix}:control"


class ClusterControl:
    def __init__(self, redis: Redis, *, prefix: str, instance: str, ttl: float, on_cancel: OnCancel) -> None:
        self.redis = redis
        self.channel = channel_name(prefix)
        self.instance = instance
        self.ttl = ttl
        self.on_cancel = on_cancel
        self._elsewhere: dict[str, _Seen] = {}
        self._outgoing: asyncio.Queue[str] = asyncio.Queue(OUTGOING_LIMIT)
        self.subscribed = asyncio.Event()  # set while the listener is subscribed (tests wait for it)

    # --- what runs where ------------------------------------------------------------------------

    def running_elsewhere(self, key: str) -> tuple[str, int] | None:
        """(instance, inbox id) of the turn of ``key`` another process runs, as far as known now."""
        seen = self._elsewhere.get(key)
        if seen is None:
            return None
        if time.monotonic() - seen.at > self.ttl:
            del self._elsewhere[key]
            return None
        return seen.instance, seen.inbox_id

    def started(self, key: str, inbox_id: int) -> None:
        self._send({"op": "started", "instance": self.instance, "key": key, "inbox": inbox_id})

    def finished(self, key: str, inbox_id: int) -> None:
        self._send({"op": "finished", "instance": self.instance, "key": key, "inbox": inbox_id})

    def heartbeat(self, items: Sequence[tuple[str, int]]) -> None:
        self._send({"op": "running", "instance": self.instance, "items": [list(item) for item in items]})

    def cancel(self, instance: str, key: str, inbox_id: int) -> None:
        """Ask ``instance`` to cancel its turn of ``key`` on row ``inbox_id``."""
        self._send({"op": "cancel", "instance": instance, "key": key, "inbox": inbox_id})

    # --- the two tasks ----------------------------------------------------------------------------

    async def publish(self) -> None:
        """Send queued messages in order; while Redis is down they wait (the oldest dropped past
        :data:`OUTGOING_LIMIT`)."""
        while True:
            message = await self._outgoing.get()
            while True:
                try:
                    await self.redis.publish(self.channel, message)
                    break
                except RedisError:
                    await asyncio.sleep(RETRY)

    async def listen(self) -> None:
        """Receive the other processes' messages, resubscribing after Redis comes back."""
        while True:
            try:
                async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel)
                    self.subscribed.set()
                    while True:
                        message = await pubsub.get_message(timeout=RETRY)
                        if message is not None and message.get("type") == "message":
                            self._receive(str(message["data"]))
            except RedisError as error:
                self.subscribed.clear()
                log.debug("control channel lost (%s); resubscribing", error)
                await asyncio.sleep(RETRY)

    def _send(self, message: dict[str, object]) -> None:
        data = json.dumps(message, separators=(",", ":"))
        if self._outgoing.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self._outgoing.get_nowait()
        self._outgoing.put_nowait(data)

    def _receive(self, data: str) -> None:
        try:
            message = json.loads(data)
            op, instance = message["op"], str(message["instance"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring a malformed control message: %.200s", data)
            return
        now = time.monotonic()
        if op == "cancel":
            if instance == self.instance:
                self.on_cancel(str(message["key"]), int(message["inbox"]))
            return
        if instance == self.instance:
            return
        if op == "started":
            self._elsewhere[str(message["key"])] = _Seen(instance, int(message["inbox"]), now)
        elif op == "finished":
            seen = self._elsewhere.get(str(message["key"]))
            if seen is not None and seen.instance == instance and seen.inbox_id == int(message["inbox"]):
                del self._elsewhere[str(message["key"])]
        elif op == "running":
            listed = {str(key): int(inbox) for key, inbox in message["items"]}
            for key, seen in list(self._elsewhere.items()):
                if seen.instance == instance and key not in listed:
                    del self._elsewhere[key]
            for key, inbox in listed.items():
                self._elsewhere[key] = _Seen(instance, inbox, now)
        self._forget_stale(now)

    def _forget_stale(self, now: float) -> None:
        for key, seen in list(self._elsewhere.items()):
            if now - seen.at > self.ttl:
                del self._elsewhere[key]
