"""The model request cap over a cluster: this process's cap, then the cluster's (Redis).

A request first takes one of this process's ``agent.max_concurrent_requests`` slots, then one of the
cluster's ``cluster.max_concurrent_requests`` (``gateway.cluster.counting.semaphore``). When Redis cannot
be reached the request goes on under the local cap alone (logged): a running turn is not stopped by the
coordination layer going away, and new turns are not started meanwhile anyway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agent.api import LocalRequestLimiter, RequestLimiter
from gateway.cluster.counting.semaphore import RedisSemaphore
from gateway.cluster.redis import Cluster, redis_key


class ClusterRequestLimiter(RequestLimiter):
    """This process's slot first, then the cluster's; both released when the request ends."""

    def __init__(self, local: LocalRequestLimiter, shared: RedisSemaphore) -> None:
        self.local = local
        self.shared = shared

    @property
    def in_flight(self) -> int:
        """This process's requests in flight."""
        return self.local.in_flight

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.local.slot(), self.shared.slot(unreachable="skip"):
            yield


def cluster_request_limiter(cluster: Cluster, local: LocalRequestLimiter) -> RequestLimiter:
    """``local`` with the cluster's cap (``cluster.max_concurrent_requests``) on top, when one is set."""
    total = cluster.settings.max_concurrent_requests
    if total is None:
        return local
    shared = RedisSemaphore(
        cluster.redis, redis_key("requests"), total, ttl=cluster.settings.lease_ttl, owner=cluster.instance_id
    )
    return ClusterRequestLimiter(local, shared)
