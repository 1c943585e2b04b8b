"""A platform's receiving shards as leases in Redis, spread over the processes of a cluster.

A platform may split a bot's receiving into shards (Discord requires it past 2,500 servers: each shard
a gateway connection); one process holding them all would cap the bot at one machine. An adapter that
receives so is a :class:`ShardedReceiver` (``adapters.discord.DiscordAdapter``). Each shard is a
lease (``herald:PLATFORM:shard:N:I`` for shard I of N), held and run by one process at a time: a
:class:`gateway.cluster.leases.lease.RedisLease` kept by a :class:`resilience.renewal.Renewer` that
fences itself as the leader's does (``gateway.cluster.leases.leader``): renewed every ``ttl/3``, and its
connection closed by its holder once ``ttl/2`` has passed without a successful renewal — before the
lease can expire and another process connect the same shard. When the connection to Redis breaks
(``gateway.cluster.watch``), every shard's lease is renewed at once and then every 0.2 s until Redis
answers; a lease found gone closes its shard.
Should another process win one first, the shard runs twice for that moment, and its messages are still
answered once (the inbox is unique).

- **How many shards**: the configured count (``ShardedReceiver.configured_shards``), or else the
  platform's recommendation (``recommended_shards``: Discord's ``GET /gateway/bot``), asked by the first
  process that needs it and kept in Redis for a day (``herald:PLATFORM:shard_count``), so every process
  uses the same count. When the count changes, each process closes the shards of the old count and
  takes leases of the new one.
- **How many per process**: every process heartbeats in a sorted set of members
  (``herald:members``, scored by when its entry expires, in Redis' own clock); a process holds at most
  ``ceil(shards / members)``: it releases the shards over that share (after closing them) and takes
  free ones up to it, trying a taken one again just after its lease expires: a shard whose holder
  died is taken over within the TTL of the holder's last renewal, and one released (its holder stopped,
  or handed it over) at once: the release is announced (``gateway.cluster.watch``) and wakes a round.
- A platform may allow only so many new connections per bot (Discord: one IDENTIFY per 5 seconds): a
  process connects a shard only after taking a key that lives ``identify_spacing`` seconds
  (``herald:PLATFORM:identify``), so shards connect one after another across the cluster.
- A shard that fails to connect is closed and released, and this process leaves it alone for a while
  (another process may fare better).

The keeper never raises out of :meth:`ShardKeeper.run`; Redis failures are logged once per streak.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from redis.asyncio import Redis

from gateway.cluster.leases.lease import RedisLease, holder_value, milliseconds
from gateway.cluster.redis import RedisUnavailable, reaching, redis_key
from resilience.loops import BackgroundLoop
from resilience.renewal import Loss, Policy, Renewer

log = logging.getLogger(__name__)

MEMBERS_KEY = redis_key("members")
COUNT_TTL = 24 * 3600  # seconds a platform's recommended count is kept before it is asked again
FAILED_SHARD_PAUSE = 30.0  # seconds this process leaves a shard alone after it failed to connect

# KEYS[1] the members set, ARGV[1] this member, ARGV[2] its entry's TTL in ms: {the live members'
# count, ms until the soonest other member's entry expires (-1: none)}.
HEARTBEAT = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
local first = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
local soonest = -1
for i = 1, #first, 2 do
    if first[i] ~= ARGV[1] then
        soonest = tonumber(first[i + 1]) - ms
        break
    end
end
return {redis.call('ZCARD', KEYS[1]), soonest}
"""
# KEYS[1] the members set, ARGV[1] this member: leave at once (a graceful stop).
LEAVE = "return redis.call('ZREM', KEYS[1], ARGV[1])"


@runtime_checkable
class ShardedReceiver(Protocol):
    """An adapter whose receiving is split into shards (``adapters.discord.DiscordAdapter``)."""

    @property
    def platform(self) -> str: ...

    @property
    def configured_shards(self) -> int | None:
        """The count its settings ask for (None: the platform's recommendation)."""

    @property
    def identify_spacing(self) -> float:
        """Seconds between two new connections of this bot, over every process."""

    async def recommended_shards(self) -> int: ...

    async def receive_shard(self, shard_id: int, shard_count: int) -> None: ...

    async def stop_shard(self, shard_id: int) -> None: ...


def shard_key(platform: str, shard_id: int, shard_count: int) -> str:
    return redis_key(platform, "shard", str(shard_count), str(shard_id))


def count_key(platform: str) -> str:
    """Where the shard count every process uses is kept (when none is configured)."""
    return redis_key(platform, "shard_count")


def identify_key(platform: str) -> str:
    """Held for ``identify_spacing`` after each new connection of the platform's bot."""
    return redis_key(platform, "identify")


def shard_policy(ttl: float) -> Policy:
    """Trusted for half the TTL after each renewal was sent, then closed; a broken connection re-checks
    the lease at once (closing a shard costs an IDENTIFY: not for a blip that Redis survived)."""
    return Policy(ttl, trust=ttl / 2, fence=True)


@dataclass(eq=False)
class _Held:
    shard_id: int
    count: int
    lease: RedisLease
    renewer: Renewer
    starting: asyncio.Task[None] | None = None
    failed: bool = False


class ShardKeeper:
    """Holds this process's share of the shard leases and runs those shards on ``receiver``.

    The shard count is the receiver's configured one (None: the platform's recommendation, kept in
    Redis). ``ttl``: the leases' TTL in seconds (``cluster.leader_ttl``). ``clock`` is monotonic seconds.
    """

    def __init__(
        self,
        redis: Redis,
        instance_id: str,
        ttl: float,
        receiver: ShardedReceiver,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.instance_id = instance_id
        self.ttl = ttl
        self.receiver = receiver
        self.platform = receiver.platform
        self.shard_count = receiver.configured_shards
        self.clock = clock
        self.policy = shard_policy(ttl)
        self._heartbeat = redis.register_script(HEARTBEAT)
        self._leave = redis.register_script(LEAVE)
        self._held: dict[int, _Held] = {}
        self._resting: dict[int, float] = {}  # shard id -> until when this process leaves it alone
        self._failing = False
        self._keeping = BackgroundLoop(f"the {self.platform} shard keeper ({instance_id})", self.run)
        self._stopped = False
        self._next_try: float | None = None  # when a taken shard this process wants expires
        self._wake = asyncio.Event()  # set: run a round now

    def suspect(self) -> None:
        """The connection to Redis broke: Redis may have forgotten the shard leases, so each is renewed
        at once (see the module), and the membership with the next round, now."""
        for held in self._held.values():
            held.renewer.suspect()
        self._try_at(self.clock())
        self._wake.set()

    def released(self, key: str) -> None:
        """A lease was announced released (``ConnectionWatch.on_released``): if it is one of this
        platform's shards, a round runs now (it takes the shard if this process's share has room)."""
        if key.startswith(redis_key(self.platform, "shard", "")):
            self._try_at(self.clock())
            self._wake.set()

    @property
    def interval(self) -> float:
        return self.policy.interval

    def held(self) -> dict[int, int]:
        """The shards this process holds a lease for now: shard id → shard count."""
        return {h.shard_id: h.count for h in self._held.values() if h.renewer.lost is None}

    @asynccontextmanager
    async def keeping(self) -> AsyncIterator[ShardKeeper]:
        """Run :meth:`run` for the life of the block; on exit :meth:`stop`."""
        self._keeping.start()
        try:
            yield self
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Close and release every shard held, and leave the members (a graceful shutdown). Idempotent."""
        self._stopped = True  # also when a library swallows the cancellation: run() ends all the same
        await self._keeping.stop()

    async def run(self) -> None:
        """Keep the share until cancelled; then leave the members, close and release everything held."""
        try:
            while not self._stopped:
                try:
                    await self._round()
                except Exception:  # a bug or a platform failure must not end the keeping for good
                    log.exception("keeping the %s shard leases failed; trying again", self.platform)
                now = self.clock()
                wake = min(now + self.interval, self._next_try or now + self.interval)
                self._next_try = None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.01, wake - now)):
                        await self._wake.wait()
                self._wake.clear()
        finally:  # leave first: a process woken by a release counts the members without this one
            with contextlib.suppress(RedisUnavailable, TimeoutError):
                async with asyncio.timeout(self.interval):
                    with reaching(self.redis):
                        await self._leave(keys=[MEMBERS_KEY], args=[self.instance_id])
            for held in list(self._held.values()):
                await self._drop(held, release=True)

    # --- one round ----------------------------------------------------------------------------------

    async def _round(self) -> None:
        for held in [h for h in self._held.values() if h.failed]:
            self._resting[held.shard_id] = self.clock() + FAILED_SHARD_PAUSE
            await self._drop(held, release=True)
        await self._drop_lost()
        extra: list[_Held] = []  # ours, to hand over (over the share, or of an old shard count)
        won: list[_Held] = []
        now = self.clock()
        try:
            async with asyncio.timeout(self.interval):
                with reaching(self.redis):
                    members, soonest = await self._heartbeat(
                        keys=[MEMBERS_KEY], args=[self.instance_id, milliseconds(self.ttl)]
                    )
                    if int(soonest) >= 0:  # a member that stops heartbeating is gone then: look again
                        self._try_at(now + min(self.interval, int(soonest) / 1000 + 0.02))
                    count = await self._count()
                extra.extend(h for h in self._held.values() if h.count != count)
                keep = sorted((h for h in self._held.values() if h not in extra), key=lambda h: h.shard_id)
                share = math.ceil(count / max(1, int(members)))
                extra.extend(keep[share:])
                await self._win(count, share - len(keep), won)
        except (RedisUnavailable, TimeoutError) as error:
            if not self._failing:
                log.warning("cannot keep the %s shard leases (%s); trying again", self.platform, error)
            self._failing = True
        else:
            if self._failing:
                log.info("Redis answers again; keeping the %s shard leases", self.platform)
            self._failing = False
        for held in extra:
            log.info(
                "%s shard %d/%d: more than this process's share; handing it over",
                self.platform,
                held.shard_id,
                held.count,
            )
            await self._drop(held, release=True)
        for held in won:
            self._held[held.shard_id] = held
            held.renewer.start()
            name = f"{self.platform} shard {held.shard_id}"
            held.starting = asyncio.create_task(self._start(held), name=name)
        await self._drop_lost()

    async def _count(self) -> int:
        """The shard count every process uses (see the module)."""
        if self.shard_count is not None:
            return self.shard_count
        key = count_key(self.platform)
        stored = await self.redis.get(key)
        if stored is None:
            recommended = await self.receiver.recommended_shards()  # DeliveryError: the round fails
            await self.redis.set(key, recommended, nx=True, ex=COUNT_TTL)
            stored = await self.redis.get(key)
        return int(stored) if stored is not None else 1

    async def _win(self, count: int, wanted: int, won: list[_Held]) -> None:
        """Try free shards (starting at a place of this process's own, so processes do not all race
        for shard 0) until ``wanted`` more are won; each win goes into ``won`` as soon as it is sure."""
        if wanted <= 0:
            return
        now = self.clock()
        start = sum(self.instance_id.encode()) % count
        for offset in range(count):
            shard_id = (start + offset) % count
            if shard_id in self._held or self._resting.get(shard_id, 0.0) > now:
                continue
            value = holder_value(self.instance_id)
            key = shard_key(self.platform, shard_id, count)
            lease = RedisLease(self.redis, key, value, self.ttl, announce=True)
            renewer = Renewer(
                lease,
                self.policy,
                name=f"{self.platform} shard {shard_id}/{count}'s lease",
                on_lost=lambda _: self._wake.set(),
                clock=lambda: self.clock(),
            )
            attempt = renewer.attempt()
            holder = await lease.take()
            if holder is not None:  # try again just after it expires (a dead holder's shard within its TTL)
                self._try_at(attempt.sent + holder.retry_in(self.interval))
            elif not renewer.confirm(attempt):  # answered across a break: Redis may have forgotten it
                await lease.release()
            else:
                won.append(_Held(shard_id, count, lease, renewer))
                if len(won) >= wanted:
                    return

    def _try_at(self, when: float) -> None:
        """Run the next round no later than ``when``."""
        self._next_try = when if self._next_try is None else min(self._next_try, when)

    async def _start(self, held: _Held) -> None:
        try:
            await self._identify_turn()
            await self.receiver.receive_shard(held.shard_id, held.count)
        except Exception as error:
            log.error("%s shard %d/%d could not connect (%s); handing it over", self.platform,
                      held.shard_id, held.count, error)  # fmt: skip
            held.failed = True
            self._wake.set()
            return
        log.info("%s shard %d/%d runs here (%s)", self.platform, held.shard_id, held.count, self.instance_id)

    async def _identify_turn(self) -> None:
        """Wait for this bot's next connection slot across the cluster: one per ``identify_spacing``
        seconds per bot (Discord's IDENTIFY), whichever process connects (a key that lives that long)."""
        spacing = self.receiver.identify_spacing
        if spacing <= 0:
            return
        turn = RedisLease(self.redis, identify_key(self.platform), holder_value(self.instance_id), spacing)
        while True:
            try:
                async with asyncio.timeout(self.interval):
                    holder = await turn.take()
                if holder is None:
                    return
                pause = holder.retry_in(spacing)
            except (RedisUnavailable, TimeoutError):
                pause = self.interval
            await asyncio.sleep(pause)

    async def _drop_lost(self) -> None:
        """Close the shards whose lease was lost (taken, or not renewed for ``ttl/2``)."""
        for held in [h for h in self._held.values() if h.renewer.lost is not None]:
            if held.renewer.lost is Loss.LAPSED:
                log.error("%s shard %d/%d: no lease renewal for leader_ttl/2; closing it", self.platform,
                          held.shard_id, held.count)  # fmt: skip
            else:
                log.warning("%s shard %d/%d: its lease expired or was taken; closing it", self.platform,
                            held.shard_id, held.count)  # fmt: skip
            await self._drop(held, release=False)

    async def _drop(self, held: _Held, *, release: bool) -> None:
        """Close the shard's connection, then (``release``) give its lease back."""
        self._held.pop(held.shard_id, None)
        await held.renewer.stop()
        if held.starting is not None and not held.starting.done():
            held.starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await held.starting
        try:
            await self.receiver.stop_shard(held.shard_id)
        except Exception:
            log.exception("closing %s shard %d failed", self.platform, held.shard_id)
        if release:
            try:
                async with asyncio.timeout(self.interval):
                    await held.lease.release()
            except (RedisUnavailable, TimeoutError) as error:
                log.info(
                    "could not release %s shard %d's lease (it expires by itself): %s",
                    self.platform,
                    held.shard_id,
                    error,
                )
