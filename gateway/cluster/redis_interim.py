"""Interim: the Redis connection the shared send budget uses, until ``gateway.cluster.redis`` (being
written in parallel for issue 15) gives the cluster its one connection; then this module goes.

Every command is bounded by ``REDIS_TIMEOUT`` (a Redis that stopped answering fails the call, it never
hangs it). Nothing is checked at start: a Redis that is down is a state the callers report.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.asyncio import Redis

REDIS_TIMEOUT = 5.0


@asynccontextmanager
async def open_redis(url: str) -> AsyncIterator[Redis]:
    """A client of the Redis at ``url`` (``redis://``, ``rediss://``), closed on exit."""
    client = Redis.from_url(url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT)
    try:
        yield client
    finally:
        await client.aclose()
