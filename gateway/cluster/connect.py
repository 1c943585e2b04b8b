"""The Redis client of a cluster process (``cluster.redis_url``), opened and closed with the process.

A minimal helper written with the work queue; the cluster's connection module
(``gateway/cluster/redis.py``, written alongside) is meant to take its place. Nothing is connected
here: the client connects on first use, so a process starts while Redis is down (and says so in
``/readyz``) instead of failing. Commands fail fast (one retry, short timeouts) so that an outage is
seen at once and handled by the caller as a state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from gateway.config import ConfigError, HeraldConfig
from gateway.home import HeraldHome, from_environment

CONNECT_TIMEOUT = 2.0
COMMAND_TIMEOUT = 10.0  # above the longest blocking read (gateway.cluster.work_stream.READ_BLOCK_MS)


def redis_url(config: HeraldConfig, home: HeraldHome) -> str:
    value = config.cluster.redis_url
    if value is None:
        raise ConfigError("cluster.redis_url is not set: this process does not run in a cluster")
    return from_environment(value, "cluster.redis_url", home)


@asynccontextmanager
async def open_redis(config: HeraldConfig, home: HeraldHome) -> AsyncIterator[Redis]:
    client = Redis.from_url(
        redis_url(config, home),
        decode_responses=True,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=COMMAND_TIMEOUT,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
    )
    try:
        yield client
    finally:
        await client.aclose()
