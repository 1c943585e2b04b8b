"""What the processes of a cluster share with the agent they each build (``agent.assembly.Shared``):
fenced session leases, the cluster's cap on model requests, the spend figures in Redis.

Imported only in cluster mode (``cluster.redis_url``): it imports redis-py.
"""

from __future__ import annotations

from agent.api import Loader, LocalRequestLimiter, RequestLimiter, SessionLocks, SpendCounters
from agent.db import Storage
from gateway.cluster.counting.requests import cluster_request_limiter
from gateway.cluster.counting.spending import RedisCounters
from gateway.cluster.leases.session_locks import RedisSessionLocks, lease_owner
from gateway.cluster.redis import Cluster


class ClusterShare:
    """The agent's shared parts on ``cluster``'s Redis."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def session_locks(self, storage: Storage) -> SessionLocks:
        """Fenced Redis leases, suspected as soon as the connection to Redis breaks."""
        cluster = self.cluster
        locks = RedisSessionLocks(
            cluster.redis,
            storage,
            owner=lease_owner(cluster.instance_id),
            lease_ttl=cluster.settings.lease_ttl,
        )
        cluster.watch.on_lost(locks.suspect)
        return locks

    def request_limiter(self, local: LocalRequestLimiter) -> RequestLimiter:
        return cluster_request_limiter(self.cluster, local)

    def spend_counters(self, spent: Loader, *, hold_ttl: float) -> SpendCounters:
        return RedisCounters(self.cluster.redis, spent, hold_ttl=hold_ttl)
