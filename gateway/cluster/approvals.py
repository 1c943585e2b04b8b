"""Approvals across the cluster: "the held command CODE was answered", published for every process.

The answer itself is a row in the database (``gateway.approvals.records``); this channel only wakes the
process whose turn waits for it, at once, when the button was pressed on another process. A message
lost (a subscriber reconnecting: pub/sub keeps nothing) costs a moment, never the answer: the waiting
turn also reads the row itself, with backoff (``gateway.approvals.service``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.cluster.redis import redis_key

log = logging.getLogger(__name__)

CHANNEL = redis_key("approvals")
RETRY = 1.0  # seconds between attempts to subscribe while Redis cannot be reached
PUBLISH_TIMEOUT = 5.0


class ApprovalChannel:
    """Publishes this process's decisions; hands every decision published (its own too) to ``wake``."""

    def __init__(self, redis: Redis, wake: Callable[[str], None]) -> None:
        self.redis = redis
        self.wake = wake
        self.subscribed = asyncio.Event()  # set while listening (tests wait for it)

    async def announce(self, code: str) -> None:
        """Tell every process that ``code`` was answered; raises ``RedisError`` or ``TimeoutError``."""
        async with asyncio.timeout(PUBLISH_TIMEOUT):
            await self.redis.publish(CHANNEL, code)

    async def listen(self) -> None:
        """Wake the waits of this process for every decision announced (run as a background loop)."""
        while True:
            try:
                async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self.subscribed.set()
                    while True:
                        message = await pubsub.get_message(timeout=RETRY)
                        if message is not None and message.get("type") == "message":
                            self.wake(str(message["data"]))
            except RedisError as error:
                self.subscribed.clear()
                log.debug("approvals channel lost (%s); resubscribing", error)
                await asyncio.sleep(RETRY)
