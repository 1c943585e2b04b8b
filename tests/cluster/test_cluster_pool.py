"""A process's connections to the cluster's Redis are a fixed number (``cluster.redis_connections``):
a burst waits its turn for them, a Redis that is away is still one, and the figures are on /metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.cluster.approvals import ApprovalChannel
from gateway.cluster.leases.lease import RedisLease, holder_value
from gateway.cluster.pool import REPORT_EVERY, SLOW_WAIT, BoundedPool, Waits
from gateway.cluster.queue.work_stream import WorkStream
from gateway.cluster.redis import Cluster, PoolExhausted, RedisUnavailable, connect, open_cluster, ping
from gateway.config import REDIS_LISTENERS, ConfigError, HeraldConfig
from gateway.home import HeraldHome
from gateway.intake.work import Work, WorkKind
from gateway.server.metrics import GatewayMetrics
from resilience.renewal import Renewal
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(60)

BURST = 200
CONNECTIONS = REDIS_LISTENERS + 1  # the least the setting takes: one connection beside the listeners


def cluster_config(redis_url: str, connections: int) -> HeraldConfig:
    return HeraldConfig.model_validate({
        "storage": {"url": "postgresql://herald@127.0.0.1/unused"},  # a cluster's; never opened here
        "cluster": {"redis_url": redis_url, "redis_connections": connections, "instance_id": "burst"},
    })  # fmt: skip


async def clients(redis_server: RedisServer) -> list[dict[str, Any]]:
    """Every connection the Redis server has now but the one asking."""
    async with Redis.from_url(redis_server.url, decode_responses=True) as asking:
        own = await asking.client_id()
        return [client for client in await asking.client_list() if int(client["id"]) != own]


async def blocked_reader(redis_server: RedisServer) -> bool:
    """Whether a connection is blocked in ``XREADGROUP`` now."""
    return any(c["cmd"] == "xreadgroup" and "b" in c["flags"] for c in await clients(redis_server))


@asynccontextmanager
async def listening(cluster: Cluster) -> AsyncIterator[tuple[list[str], WorkStream, list[Work]]]:
    """The two listeners of the pool a gateway process runs (beside the watch's own connection): a
    pub/sub channel (the approvals') and the work queue's blocking read, each holding a connection."""
    woken: list[str] = []
    channel = ApprovalChannel(cluster.redis, woken.append)
    stream = WorkStream(cluster.redis, prefix="herald", consumer=cluster.instance_id)
    await stream.ensure_group()
    read: list[Work] = []

    async def reading() -> None:
        while True:
            read.extend(entry.work for entry in await stream.read(10, block_ms=5000) if entry.work)

    tasks = [asyncio.create_task(channel.listen()), asyncio.create_task(reading())]
    try:
        await wait_until(channel.subscribed.is_set, what="the approvals channel subscribed")
        yield woken, stream, read
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)


async def test_a_burst_waits_its_turn_within_the_bound_and_nothing_looks_unreachable(
    redis_server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = cluster_config(redis_server.url, CONNECTIONS)
    async with (
        open_cluster(config, HeraldHome(tmp_path)) as cluster,
        listening(cluster) as (woken, stream, read),
    ):
        await wait_until(cluster.watch.connected.is_set, what="the connection watch connected")
        await wait_until_awaited(lambda: blocked_reader(redis_server), what="the reader blocked")
        value = holder_value("burst")
        leases = [RedisLease(cluster.redis, f"herald:test:{n}", value, 30.0) for n in range(BURST)]

        taken = await asyncio.gather(*(lease.take() for lease in leases))
        renewed = await asyncio.gather(*(lease.renew() for lease in leases))

        assert taken == [None] * BURST and renewed == [Renewal.HELD] * BURST  # none found Redis away
        figures = cluster.connections()
        assert len(await clients(redis_server)) == figures.open <= CONNECTIONS == figures.limit
        assert figures.waits >= BURST  # the burst queued for the connections beside the two listeners
        # The listeners were neither starved nor starving: the blocked reader and the channel still hear.
        await stream.add([Work(WorkKind.MESSAGE, "telegram:chat:1", 7)])
        await wait_until(lambda: [work.inbox_id for work in read] == [7], what="the reader read the entry")
        await cluster.redis.publish("herald:approvals", "abc123")
        await wait_until(lambda: woken == ["abc123"], what="the approvals channel heard the decision")
        assert cluster.watch.lost == 0
        assert shown(cluster, "gateway_redis_connections_limit") == CONNECTIONS
        assert shown(cluster, "gateway_redis_connections_open") == figures.open
        assert shown(cluster, "gateway_redis_pool_waits_total") >= BURST
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [line for line in said if "nreachable" in line or "cannot be reached" in line], said


def shown(cluster: Cluster, name: str) -> float:
    """What /metrics shows as ``name`` for ``cluster``'s connections."""
    metrics = GatewayMetrics()
    metrics.count_redis_connections(cluster.connections)
    lines = metrics.render().decode().splitlines()
    return float(next(line for line in lines if line.startswith(f"{name} ")).split()[1])


async def test_a_redis_that_is_away_is_still_unavailable_not_a_full_pool(redis_server: RedisServer) -> None:
    redis = connect(redis_server.url, CONNECTIONS)
    try:
        lease = RedisLease(redis, "herald:test:away", holder_value("away"), 30.0)
        assert await lease.take() is None
        redis_server.halt()
        with pytest.raises(RedisUnavailable, match="cannot be reached"):
            await lease.renew()
        with pytest.raises(RedisUnavailable, match="cannot be reached"):
            await ping(redis, 5.0)
    finally:
        await redis.aclose()


async def test_a_ping_that_finds_every_connection_held_says_so(redis_server: RedisServer) -> None:
    redis = connect(redis_server.url, CONNECTIONS)
    pool = redis.connection_pool
    assert isinstance(pool, BoundedPool)
    held = [await pool.get_connection() for _ in range(pool.max_connections)]  # a leak, say
    try:
        with pytest.raises(PoolExhausted, match=r"all 4 pooled ones are in use \(cluster\.redis_connections"):
            await ping(redis, 0.05)
        await pool.release(held.pop())
        await ping(redis, 5.0)  # one given back: the next command has it
    finally:
        for connection in held:
            await pool.release(connection)
        await redis.aclose()


def test_a_url_that_sizes_the_pool_itself_is_refused(redis_server: RedisServer) -> None:
    with pytest.raises(ConfigError, match="leave them out of the URL"):
        connect(f"{redis_server.url}?max_connections=1000")


def test_slow_waits_are_reported_at_most_once_a_while_and_every_wait_is_counted() -> None:
    waits = Waits()
    assert not waits.record(0.01, now=100.0)  # a short wait: counted only
    assert waits.record(SLOW_WAIT, now=101.0)  # the first slow one: reported
    line = waits.report(pooled=11, now=101.0)
    assert "1 Redis command(s) waited" in line and "cluster.redis_connections = 12" in line
    assert not waits.record(3.0, now=102.0)  # within REPORT_EVERY of the last report: kept for the next
    assert not waits.record(2.0, now=100.0 + REPORT_EVERY)
    assert waits.record(SLOW_WAIT, now=101.0 + REPORT_EVERY)  # REPORT_EVERY after the last report
    later = waits.report(pooled=11, now=101.0 + REPORT_EVERY)
    assert "3 Redis command(s) waited" in later and "(the longest 3.0s)" in later
    assert (waits.count, round(waits.seconds, 2)) == (5, round(0.01 + SLOW_WAIT + 3.0 + 2.0 + SLOW_WAIT, 2))
