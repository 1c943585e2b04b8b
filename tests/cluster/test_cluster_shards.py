"""The shard keeper on a real Redis, with a recording receiver in place of Discord: shares, the shard
count kept in Redis, IDENTIFYs spaced across the processes, and never one shard in two places."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import pytest

from gateway.cluster.leases.shards import ShardedReceiver, ShardKeeper, count_key
from gateway.cluster.redis import connect as open_redis
from tests.cluster_leader_support import LeaseCalls, until
from tests.redis_server import RedisServer

TTL = 10.0  # a keeper stalled by a loaded machine for less than 5 s keeps its shards
SLACK = 10.0
SPACING = 0.3  # seconds between two IDENTIFYs of the bot, across the processes


@dataclass
class World:
    """Every receiver's shards, and when each connection started and stopped."""

    recommended: int = 4
    running: dict[int, str] = field(default_factory=dict)  # shard id -> who runs it
    connects: list[tuple[float, str, int]] = field(default_factory=list)
    overlaps: list[int] = field(default_factory=list)
    stops: list[tuple[float, str, int]] = field(default_factory=list)


@dataclass
class Receiver:
    name: str
    world: World
    identify_spacing: float = SPACING
    configured_shards: int | None = None
    platform: str = "discord"
    asked: int = 0

    async def recommended_shards(self) -> int:
        self.asked += 1
        return self.world.recommended

    async def receive_shard(self, shard_id: int, shard_count: int) -> None:
        if shard_id in self.world.running:
            self.world.overlaps.append(shard_id)
        self.world.running[shard_id] = self.name
        self.world.connects.append((time.monotonic(), self.name, shard_id))

    async def stop_shard(self, shard_id: int) -> None:
        self.world.stops.append((time.monotonic(), self.name, shard_id))
        if self.world.running.get(shard_id) == self.name:
            del self.world.running[shard_id]


@asynccontextmanager
async def keeper(url: str, name: str, world: World, stack: AsyncExitStack) -> AsyncIterator[ShardKeeper]:
    redis = open_redis(url)
    stack.push_async_callback(redis.aclose)
    receiver = Receiver(name, world)
    assert isinstance(receiver, ShardedReceiver)
    async with ShardKeeper(redis, name, TTL, receiver).keeping() as kept:
        yield kept


def shares(world: World) -> dict[str, int]:
    counts: dict[str, int] = {}
    for who in world.running.values():
        counts[who] = counts.get(who, 0) + 1
    return counts


def spaced_since(start: float, world: World) -> bool:
    """Whether the connections made since ``start`` took one IDENTIFY turn each: the k-th of them came
    at least k turns after ``start``. Redis spaces the turns (a key that lives ``identify_spacing``);
    a connection comes after its turn, late on a loaded machine, never early, so this bound holds
    however slow the machine (a spacing between two connections measured here would not: the earlier
    one may be recorded late)."""
    times = sorted(at for at, _, _ in world.connects if at >= start)
    return all(at - start >= k * (SPACING - 0.01) for k, at in enumerate(times))


async def test_shards_are_shared_out_identified_one_at_a_time_and_handed_over(
    redis_server: RedisServer,
) -> None:
    world = World()
    async with AsyncExitStack() as outer:
        first = AsyncExitStack()
        outer.push_async_callback(first.aclose)
        started = time.monotonic()
        a = await first.enter_async_context(keeper(redis_server.url, "a", world, outer))
        await until(lambda: len(world.running) == 4, 4 * SPACING + TTL + SLACK, "a alone runs every shard")
        assert spaced_since(started, world), world.connects
        joined = time.monotonic()
        b = await outer.enter_async_context(keeper(redis_server.url, "b", world, outer))
        await until(lambda: shares(world) == {"a": 2, "b": 2}, 3 * TTL + SLACK, "two each")
        assert len(a.held()) == len(b.held()) == 2 and set(a.held()).isdisjoint(b.held())
        assert spaced_since(joined, world), world.connects
        stopping = time.monotonic()
        await first.aclose()  # a stops: it hands its shards back at once
        await until(lambda: shares(world) == {"b": 4}, TTL + SLACK, "b runs every shard")
        assert spaced_since(stopping, world), world.connects
        reader = open_redis(redis_server.url)
        outer.push_async_callback(reader.aclose)
        stored = await reader.get(count_key("discord"))
    assert stored == "4"  # asked once, kept for every process
    assert world.overlaps == []


async def test_a_configured_count_wins_over_discords_recommendation(redis_server: RedisServer) -> None:
    """(A holder cut off from Redis closes its shard before another takes it: the renewal policy,
    ``tests/storage/test_renewal.py``, and end to end ``tests/cluster/test_cluster_discord.py``.)"""
    world = World(recommended=7)  # not asked: the configured count is used
    async with AsyncExitStack() as stack:
        redis = open_redis(redis_server.url)
        stack.push_async_callback(redis.aclose)
        a_receiver, b_receiver = Receiver("a", world, 0.0, 2), Receiver("b", world, 0.0, 2)  # 2 configured
        await stack.enter_async_context(ShardKeeper(redis, "a", TTL, a_receiver).keeping())
        await stack.enter_async_context(ShardKeeper(redis, "b", TTL, b_receiver).keeping())
        await until(lambda: shares(world) == {"a": 1, "b": 1}, 3 * TTL + SLACK, "one each")
    assert a_receiver.asked == b_receiver.asked == 0
    assert world.overlaps == []


async def test_a_keeper_closes_shards_redis_forgot_before_another_process_can_start_them(
    redis_server: RedisServer,
) -> None:
    """Redis restarts empty: the keeper, told of the break at once (``gateway.cluster.watch``), renews
    as soon as Redis answers, finds its leases gone and closes those shards; a process that comes
    right after takes them over without two connections to one shard (with its ordinary rounds, a
    third of a 30 s TTL, it would have found out only seconds later)."""
    from gateway.cluster.watch import ConnectionWatch

    world = World(recommended=2)
    async with AsyncExitStack() as stack:
        redis = open_redis(redis_server.url)
        stack.push_async_callback(redis.aclose)
        a = await stack.enter_async_context(ShardKeeper(redis, "a", 30.0, Receiver("a", world)).keeping())
        watch = ConnectionWatch(redis, "herald:watch")
        watching = asyncio.create_task(watch.run())
        stack.push_async_callback(watch.aclose)
        stack.callback(watching.cancel)
        await asyncio.wait_for(watch.connected.wait(), 10)
        watch.on_lost(a.suspect)
        await until(lambda: shares(world) == {"a": 2}, 2 * 0.3 + SLACK, "a runs both shards")
        await asyncio.to_thread(redis_server.halt)
        restarted = time.monotonic()
        await asyncio.to_thread(redis_server.start)  # empty: both leases forgotten
        await until(
            lambda: len([at for at, _, _ in world.stops if at >= restarted]) == 2, SLACK, "a closing both"
        )
        b_redis = open_redis(redis_server.url)  # at once: nothing of a's runs any more
        stack.push_async_callback(b_redis.aclose)
        await stack.enter_async_context(ShardKeeper(b_redis, "b", 30.0, Receiver("b", world)).keeping())
        await until(lambda: len(world.running) == 2, 2 * 0.3 + SLACK, "both shards running again")
    assert world.overlaps == []


async def test_a_keeper_that_stops_hands_its_shards_to_a_waiting_process_at_once(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release of each shard is announced (``gateway.cluster.watch``): the waiting keeper takes them
    at once, not at its next round (a third of the TTL: here 100 s, far beyond the wait)."""
    from gateway.cluster.redis import RELEASES
    from gateway.cluster.watch import ConnectionWatch

    ttl = 300.0
    world = World(recommended=2)
    leases = LeaseCalls.record(monkeypatch)
    async with AsyncExitStack() as stack:
        redis = open_redis(redis_server.url)
        stack.push_async_callback(redis.aclose)
        first = AsyncExitStack()
        stack.push_async_callback(first.aclose)
        await first.enter_async_context(ShardKeeper(redis, "a", ttl, Receiver("a", world, 0.0)).keeping())
        await until(lambda: shares(world) == {"a": 2}, SLACK, "a runs both shards")
        b_redis = open_redis(redis_server.url)
        stack.push_async_callback(b_redis.aclose)
        watch = ConnectionWatch(b_redis, RELEASES)
        watching = asyncio.create_task(watch.run())
        stack.push_async_callback(watch.aclose)
        stack.callback(watching.cancel)
        await asyncio.wait_for(watch.connected.wait(), 10)
        b = await stack.enter_async_context(
            ShardKeeper(b_redis, "b", ttl, Receiver("b", world, 0.0)).keeping()
        )
        watch.on_released(b.released)
        await until(lambda: any(c.holder == "b" and c.returned >= 0 for c in leases.calls), SLACK, "b tried")
        await first.aclose()  # a stops: it closes and releases both
        await until(lambda: shares(world) == {"b": 2}, SLACK, "b runs both shards")
    assert world.overlaps == []
