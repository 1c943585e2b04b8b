"""Cluster-wide caps in Redis (``gateway.cluster.counting.semaphore``): turns and model requests over
every process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from agent.assembly import request_limiter
from agent.limits import LocalRequestLimiter
from gateway.cluster.counting.requests import ClusterRequestLimiter
from gateway.cluster.counting.semaphore import RedisSemaphore
from gateway.cluster.redis import Cluster
from gateway.cluster.watch import ConnectionWatch
from gateway.wiring.runtime import cluster_share
from tests.conftest import make_config
from tests.fakes.waiting import wait_until_awaited
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url, decode_responses=True, socket_connect_timeout=1)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_shared_cap_counts_the_slots_of_every_process(redis: Redis) -> None:
    first = RedisSemaphore(redis, "test:cap", 2, ttl=5, owner="p1")
    second = RedisSemaphore(redis, "test:cap", 2, ttl=5, owner="p2")
    a, b = await first.try_take(), await first.try_take()
    assert a and b and await second.try_take() is None
    await first.release(a)
    assert await second.try_take() is not None
    assert await first.held() == 2


async def test_the_slot_of_a_holder_that_died_frees_after_its_ttl_and_a_live_one_is_renewed(
    redis: Redis,
) -> None:
    dead = RedisSemaphore(redis, "test:cap", 1, ttl=1.0, owner="dead")
    live = RedisSemaphore(redis, "test:cap", 1, ttl=1.0, owner="live")
    assert await dead.try_take() is not None  # taken, never renewed nor released
    assert await live.try_take() is None
    async with live.slot():  # waits until the dead holder's slot lapsed
        [(token, first_expiry)] = await slots(redis, "test:cap")
        assert token.startswith("live:")
        # Redis' own clock past the expiry the slot was taken with: it is held now only if renewed.
        await wait_until_awaited(lambda: redis_ms_past(redis, first_expiry), what="the first expiry passed")
        assert await dead.try_take() is None
        assert dict(await slots(redis, "test:cap"))[token] > first_expiry
    assert await dead.try_take() is not None  # released on exit


async def slots(redis: Redis, key: str) -> list[tuple[str, float]]:
    """The slots of a cap: each one's token and expiry (milliseconds of Redis' clock)."""
    found: list[Any] = await redis.zrange(key, 0, -1, withscores=True)
    return [(str(token), float(expiry)) for token, expiry in found]


async def redis_ms_past(redis: Redis, moment: float) -> bool:
    """Whether Redis' clock (in milliseconds, as the slots' expiries) is past ``moment``."""
    seconds, micros = await redis.time()
    return seconds * 1000 + micros // 1000 > moment


async def test_requests_of_several_processes_stay_under_the_cluster_cap(redis: Redis) -> None:
    limiters = [
        ClusterRequestLimiter(
            LocalRequestLimiter(5), RedisSemaphore(redis, "test:requests", 3, ttl=5, owner=f"p{n}")
        )
        for n in range(3)
    ]
    in_flight = peak = 0

    async def request(limiter: ClusterRequestLimiter) -> None:
        nonlocal in_flight, peak
        async with limiter.slot():
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1

    await asyncio.gather(*(request(limiters[n % 3]) for n in range(15)))
    assert peak == 3


async def test_a_request_goes_on_under_the_local_cap_when_redis_is_unreachable(
    redis_server: RedisServer,
) -> None:
    client = Redis.from_url(redis_server.url, decode_responses=True, socket_connect_timeout=1)
    limiter = ClusterRequestLimiter(
        LocalRequestLimiter(2), RedisSemaphore(client, "test:requests", 1, ttl=5, owner="p")
    )
    redis_server.halt()
    try:
        async with asyncio.timeout(10), limiter.slot():
            assert limiter.in_flight == 1
    finally:
        await client.aclose()


def test_the_cluster_request_cap_is_used_only_when_configured(redis: Redis) -> None:
    plain = make_config("http://127.0.0.1:1", cluster={"max_concurrent_requests": 4})
    assert isinstance(request_limiter(plain, cluster_share(None)), LocalRequestLimiter)
    cluster = Cluster("w1", redis, plain.cluster, ConnectionWatch(redis, "watch"))
    assert isinstance(request_limiter(plain, cluster_share(cluster)), ClusterRequestLimiter)
    uncapped = make_config("http://127.0.0.1:1", cluster={})
    alone = Cluster("w1", redis, uncapped.cluster, ConnectionWatch(redis, "watch"))
    assert isinstance(
        request_limiter(uncapped, cluster_share(alone)),
        LocalRequestLimiter,
    )
