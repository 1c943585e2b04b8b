"""The cluster's send pacing: the platforms' rate limits and 429 pauses, shared in Redis.

Each gateway process paces its own requests in the platform SDK (python-telegram-bot's
``AIORateLimiter`` in ``adapters.telegram.ratelimit``: 30/s per bot, 20/min per group; discord.py's
route buckets). Three processes each keeping to those would together send three times too fast. This
pacing is the layer above them that all processes share:

- Rates: each operation counts against the limits its adapter publishes (``Adapter.send_rates``:
  Telegram 30/s per bot, 1/s per chat, 20/min per group; Discord 50/s per bot) in moving windows of
  the ``limits`` library on Redis (``limits.aio``, one list per window: at most ``amount`` entries in
  any ``seconds``). :meth:`RedisSendPacing.wait` takes a slot in every window of the operation, or
  sleeps until the fullest one frees a slot; so traffic reaches each process's SDK limiter already
  within the bot's limits, and that limiter rarely waits. While the bot's window is full, a process's
  waiters for it queue in the process (first come, first served), so one per process, not every
  waiting send, looks at Redis; a waiter for one chat's window or pause holds nobody up.
- Pauses: a 429 that reaches the gateway (one the SDK did not retry itself: longer than its
  ``max_flood_wait``, or retries spent) is a Redis key with the platform's ``retry_after`` as its TTL,
  for the chat or, when the platform says so (Discord's global limit), for the whole bot: every
  process holds back until it expires. A 429 the SDK retried inside a request stays in that process.

Contract (as ``gateway.delivery.pacing.SendPacing``): ``wait`` counts the operation in every window
before it returns, so call it once right before the request; ``paused_for`` includes a full window's
wait, so the outbox sender postpones a chat whose group window is full instead of waiting a minute.
Taking the slots of several windows is not one atomic step: when another process takes the last slot of
one window in between, the slots already taken are spent unused (the pacing errs on the slow side, never
the fast). Windows are kept with each process's clock (the machines keep their clocks in sync) and
pauses with Redis's. Redis unreachable: ``wait`` and ``paused_for`` raise ``PacingUnavailable`` (send
nothing now); ``penalize`` still pauses the chat in this process and logs that the others were not told.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter
from redis.asyncio import Redis
from redis.exceptions import RedisError

from adapters.base import ChatAddress, SendRate
from gateway.delivery.pacing import LocalSendPacing, PacingUnavailable, SendPacing
from gateway.server.metrics import GatewayMetrics

log = logging.getLogger(__name__)

RatesFor = Callable[[ChatAddress], Sequence[SendRate]]  # the limits an operation to an address counts in
Window = tuple[RateLimitItem, tuple[str, ...]]  # a moving window and the identifiers of its Redis key
KEY_PREFIX = "herald:send"
JITTER = 0.01  # seconds added at random to each sleep, so processes that wait for one slot do not collide
RACE_RETRY = 0.02  # another process took a slot between the look and the take: look again this soon


class RedisSendPacing(SendPacing):
    """The pacing of one process of a cluster; every process builds one on the same Redis."""

    def __init__(
        self, redis: Redis, rates: RatesFor, metrics: GatewayMetrics, *, prefix: str = KEY_PREFIX
    ) -> None:
        self._redis = redis
        self._rates = rates
        self._metrics = metrics
        self._prefix = prefix
        shared_pool: dict[str, Any] = {"connection_pool": redis.connection_pool}  # typed float|str|bool
        storage = RedisStorage(
            "async+redis://", implementation="redispy", key_prefix=f"{prefix}:rate", **shared_pool
        )
        self._windows = MovingWindowRateLimiter(storage)
        self._local = LocalSendPacing()  # this process's pauses, which hold even when Redis does not answer
        self._bot_turns: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)  # per platform

    async def wait(self, address: ChatAddress) -> None:
        windows = self._windows_of(address)
        started = time.monotonic()
        paced = False  # whether it slept or queued for the pacing (else it went straight through)
        while True:
            own, _ = await self._delays(address, windows)
            if own > 0:  # a pause, or the chat's own window: wait without holding up other chats
                paced = await _sleep(own)
                continue
            # The bot's windows are everyone's: this process's waiters for them queue here (first come,
            # first served), so one of them, not all, looks at Redis while the window is full.
            turn = self._bot_turns[address.platform]
            paced = paced or turn.locked()
            async with turn:
                while True:
                    own, bot = await self._delays(address, windows)
                    if own > 0:
                        break  # another process sent to the chat or it was paused: back to the chat's wait
                    if bot > 0:
                        paced = await _sleep(bot)
                    elif await self._take(windows):
                        if paced:
                            self._metrics.sends_paced.labels(address.platform).inc()
                            self._metrics.send_pacing_seconds.labels(address.platform).inc(
                                time.monotonic() - started
                            )
                        return
                    else:
                        paced = await _sleep(RACE_RETRY)

    async def penalize(self, address: ChatAddress, retry_after: float, *, bot_wide: bool = False) -> None:
        self._local.remember(address, retry_after, bot_wide=bot_wide)
        milliseconds = math.ceil(retry_after * 1000)
        if milliseconds <= 0:
            return
        key = self._pause_key(address.platform, None if bot_wide else address.chat_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, 1, px=milliseconds, nx=True)
                pipe.pexpire(key, milliseconds, gt=True)  # a longer pause already set stays
                await pipe.execute()
        except RedisError as error:
            log.warning(
                "a %s 429 pauses chat %s in this process only (Redis: %s)",
                address.platform, address.chat_id, error,
            )  # fmt: skip

    async def paused_for(self, address: ChatAddress) -> float:
        return max(await self._delays(address, self._windows_of(address)))

    def _windows_of(self, address: ChatAddress) -> list[Window]:
        """Each window the operation counts against, with its identifiers: the bot's first (the one
        most often full, so a race there wastes no chat slot)."""
        rates = sorted(self._rates(address), key=lambda rate: rate.scope != "bot")
        return [
            (
                RateLimitItemPerSecond(rate.amount, rate.seconds),
                (address.platform,) if rate.scope == "bot" else (address.platform, address.chat_id),
            )
            for rate in rates
        ]

    async def _delays(self, address: ChatAddress, windows: list[Window]) -> tuple[float, float]:
        """Seconds until an operation to ``address`` may go out, as far as the pauses and the chat's own
        windows say, and as far as the bot's windows say."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.pttl(self._pause_key(address.platform, address.chat_id))
                pipe.pttl(self._pause_key(address.platform, None))
                pauses: list[int] = await pipe.execute()
            stats = [(ids, await self._windows.get_window_stats(item, *ids)) for item, ids in windows]
        except RedisError as error:
            raise PacingUnavailable(f"the cluster's send pacing cannot be read (Redis: {error})") from error
        own = max([self._local.pause(address), *(milliseconds / 1000 for milliseconds in pauses)])
        bot = 0.0
        now = time.time()
        for ids, window in stats:
            if window.remaining < 1:
                if len(ids) == 1:  # (platform,): the bot's window
                    bot = max(bot, window.reset_time - now)
                else:
                    own = max(own, window.reset_time - now)
        return own, bot

    async def _take(self, windows: list[Window]) -> bool:
        """A slot in every window; False when one was full (the slots taken before it are spent)."""
        try:
            for item, ids in windows:
                if not await self._windows.hit(item, *ids):
                    return False
        except RedisError as error:
            raise PacingUnavailable(f"the cluster's send pacing cannot be taken (Redis: {error})") from error
        return True

    def _pause_key(self, platform: str, chat_id: str | None) -> str:
        bot = f"{self._prefix}:pause:{platform}"
        return bot if chat_id is None else f"{bot}:{chat_id}"


async def _sleep(seconds: float) -> bool:
    """Sleep ``seconds`` and a little more at random (processes waiting for one slot do not collide);
    True, for the caller's record that it waited."""
    await asyncio.sleep(seconds + random.uniform(0, JITTER))
    return True
