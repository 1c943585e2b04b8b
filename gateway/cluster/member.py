"""This process as a member of a cluster: its Redis connection, its name, the leader election and
what it holds (for ``/readyz`` and ``/metrics``).

Every member is a worker (it answers what it stores, sends through every platform). The elected one
also runs the connector: each receive-on-demand adapter's inbound side (polling, or setting its
webhook), APScheduler, the idle-review sweeper and retention's pruning — see ``duties``. An adapter
whose receiving is split into shards (a ``ShardedReceiver``) has each shard as a lease that any member
may hold (``shards``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

from adapters.base import Adapter
from gateway.cluster.leases.duties import Startable, looping, receiving, scheduling
from gateway.cluster.leases.leader import Duty, Leadership
from gateway.cluster.leases.shards import ShardedReceiver, ShardKeeper
from gateway.cluster.queue.work_queue import RedisWorkQueue
from gateway.cluster.redis import Cluster
from gateway.server.metrics import GatewayMetrics

LEADER, WORKER = "leader", "worker"


class Sweeper(Protocol):
    """A loop the leader runs for its whole term (``gateway.conversation.reviews.Reviews``' idle sweeper)."""

    async def run(self) -> None: ...


@dataclass
class ClusterMember:
    instance_id: str
    redis: Redis
    leadership: Leadership
    queue: RedisWorkQueue
    session_leases: Callable[[], int]  # session leases this process holds now
    shards: Sequence[ShardKeeper] = ()  # the shard leases of each sharded adapter

    @property
    def role(self) -> str:
        """``leader`` while this process holds the leader lease, else ``worker``."""
        return LEADER if self.leadership.leading else WORKER

    async def resign(self) -> None:
        """Stop running the connector (a graceful shutdown: the next process takes over at once)."""
        await self.leadership.resign()
        for keeper in self.shards:
            await keeper.stop()

    def leases(self) -> list[str]:
        """The leases this process holds now."""
        held = ["leader"] if self.leadership.leading else []
        for keeper in self.shards:
            held += [f"{keeper.platform} shard {i}/{n}" for i, n in sorted(keeper.held().items())]
        return held

    def report(self) -> dict[str, object]:
        """What ``/readyz`` shows of this process in the cluster: its name and role, the connector leases
        and session leases it holds, and the work queue's lag (``RedisWorkQueue.report``). Redis itself
        is a readiness check of its own (``gateway.wiring.core``)."""
        return {
            "instance": self.instance_id,
            "role": self.role,
            "leases": self.leases(),
            "session_leases": self.session_leases(),
            "queue": self.queue.report(),
        }

    def observe(self, metrics: GatewayMetrics) -> None:
        """Let ``/metrics`` read this member's role and leases when scraped."""
        for role in (LEADER, WORKER):
            metrics.cluster_role.labels(self.instance_id, role).set_function(
                lambda role=role: 1.0 if self.role == role else 0.0  # type: ignore[misc]
            )
        metrics.cluster_leases.labels("leader").set_function(lambda: 1.0 if self.leadership.leading else 0.0)
        for keeper in self.shards:
            metrics.cluster_leases.labels(f"{keeper.platform}_shard").set_function(
                lambda keeper=keeper: float(len(keeper.held()))  # type: ignore[misc]
            )


@asynccontextmanager
async def open_member(
    cluster: Cluster,
    *,
    adapters: Sequence[Adapter],
    scheduler: Startable,
    reviews: Sweeper,
    queue: RedisWorkQueue,
    session_leases: Callable[[], int],
    metrics: GatewayMetrics,
    pruning: Duty | None = None,
) -> AsyncIterator[ClusterMember]:
    """Join ``cluster`` and campaign to run the connector: the inbound side
    of ``adapters`` that receive on demand (started with ``receive=False``), ``scheduler`` (not
    started), ``reviews``' idle sweeper and ``pruning`` (retention's background loop). ``queue`` and
    ``session_leases`` are reported in ``/readyz``. On exit the term ends and the lease is released."""
    settings, instance_id, redis = cluster.settings, cluster.instance_id, cluster.redis
    async with AsyncExitStack() as stack:
        leadership = Leadership(redis, instance_id, settings.leader_ttl)
        cluster.watch.on_lost(leadership.suspect)
        cluster.watch.on_released(leadership.released)
        keepers: list[ShardKeeper] = []
        for adapter in adapters:
            if isinstance(adapter, ShardedReceiver):  # each shard a lease of its own, on any process
                keeper = ShardKeeper(redis, instance_id, settings.leader_ttl, adapter)
                cluster.watch.on_lost(keeper.suspect)
                cluster.watch.on_released(keeper.released)
                keepers.append(keeper)
            elif adapter.receive_on_demand:
                leadership.add_duty(f"{adapter.platform} receiving", receiving(adapter, leadership.holds))
        leadership.add_duty("scheduler", scheduling(scheduler))
        leadership.add_duty("idle-review sweeper", looping("review sweeper", reviews.run))
        if pruning is not None:
            leadership.add_duty("storage pruner", pruning)
        member = ClusterMember(instance_id, redis, leadership, queue, session_leases, keepers)
        member.observe(metrics)
        await stack.enter_async_context(leadership.campaigning())
        for keeper in keepers:
            await stack.enter_async_context(keeper.keeping())
        yield member
