"""Prometheus metrics of one gateway process, served at ``/metrics``.

One registry per gateway (no global state): tests can run several gateways in one process. Names
follow Prometheus conventions; labels are low-cardinality (platform, outcome, token kind), never a
chat or a user.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.api import CacheMiss, Usage

TURN_SECONDS_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


class RedisConnectionFigures(Protocol):
    """A process's connections to its cluster's Redis now (``gateway.cluster.pool.RedisConnections``)."""

    @property
    def limit(self) -> int: ...
    @property
    def open(self) -> int: ...
    @property
    def in_use(self) -> int: ...
    @property
    def waits(self) -> int: ...
    @property
    def waited(self) -> float: ...


class RedisConnectionsCollector:
    """The ``gateway_redis_*`` families, read from the pool when scraped (its waits are its own count)."""

    def __init__(self, read: Callable[[], RedisConnectionFigures]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        now = self.read()
        yield GaugeMetricFamily(
            "gateway_redis_connections_limit",
            "Most connections this process opens to the cluster's Redis (cluster.redis_connections)",
            value=now.limit,
        )
        yield GaugeMetricFamily(
            "gateway_redis_connections_open", "Connections to the cluster's Redis open now", value=now.open
        )
        yield GaugeMetricFamily(
            "gateway_redis_connections_in_use",
            "Connections to the cluster's Redis taken now: the listeners' and the commands' under way",
            value=now.in_use,
        )
        yield CounterMetricFamily(
            "gateway_redis_pool_waits",
            "Redis commands that found every connection in use and waited for one",
            value=now.waits,
        )
        yield CounterMetricFamily(
            "gateway_redis_pool_wait_seconds",
            "Seconds Redis commands waited for a free connection, together",
            value=now.waited,
        )


class GatewayMetrics:
    """The counters, gauges and histograms the gateway updates as it works."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.messages_in = Counter(
            "gateway_messages_in", "Inbound messages accepted (stored in the inbox)", ["platform"],
            registry=self.registry,
        )  # fmt: skip
        self.messages_ignored = Counter(
            "gateway_messages_ignored", "Inbound messages dropped (unauthorized, not addressed, duplicate)",
            ["platform", "reason"], registry=self.registry,
        )  # fmt: skip
        self.messages_out = Counter(
            "gateway_messages_out", "Outbound operations the platform accepted", ["platform", "operation"],
            registry=self.registry,
        )  # fmt: skip
        self.turns = Counter(  # answered, failed, cancelled, refused (a spend limit)
            "gateway_turns", "Agent turns by outcome", ["outcome"], registry=self.registry
        )
        self.turn_seconds = Histogram(
            "gateway_turn_seconds", "Time from a message's arrival to its answer being queued",
            buckets=TURN_SECONDS_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.queue_depth = Gauge(
            "gateway_queue_depth", "Messages waiting for or in a turn", registry=self.registry
        )
        self.outbox_pending = Gauge(
            "gateway_outbox_pending", "Replies recorded but not yet sent", registry=self.registry
        )
        self.provider_tokens = Counter(
            "gateway_provider_tokens", "Model tokens by kind", ["kind"], registry=self.registry
        )
        self.delivery_failures = Counter(
            "gateway_delivery_failures", "Replies given up on or turns that failed for good", ["platform"],
            registry=self.registry,
        )  # fmt: skip
        self.reviews = Counter(
            "gateway_reviews", "Background reviews by outcome (done, failed, cancelled, skipped)",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        self.rate_limited = Counter(
            "gateway_rate_limited", "429 answers from a platform", ["platform"], registry=self.registry
        )
        self.session_leases = Gauge(
            "gateway_session_leases_held", "Session locks (leases, in a cluster) this process holds now",
            registry=self.registry,
        )  # fmt: skip
        self.outbox_claims = Gauge(
            "gateway_outbox_claims", "Outbox items this process has claimed and is sending (cluster)",
            registry=self.registry,
        )  # fmt: skip
        self.sends_paced = Counter(
            "gateway_sends_paced", "Operations the cluster's shared send pacing made wait", ["platform"],
            registry=self.registry,
        )  # fmt: skip
        self.send_pacing_seconds = Counter(
            "gateway_send_pacing_seconds", "Seconds operations waited for the cluster's shared send pacing",
            ["platform"], registry=self.registry,
        )  # fmt: skip
        # What this process holds, read when scraped: under steady traffic both stay level; growth the
        # queue depth does not explain (a backlog) is a leak.
        self.asyncio_tasks = Gauge(
            "gateway_asyncio_tasks", "asyncio tasks alive in this process's event loop",
            registry=self.registry,
        )  # fmt: skip
        self.db_connections_out: Gauge | None = None  # PostgreSQL only: set by count_db_connections
        # Cluster mode only (cluster.redis_url): what this process is and holds, read when scraped.
        self.cluster_role = Gauge(
            "gateway_cluster_role", "1 for this process's role: leader (runs the connector) or worker",
            ["instance", "role"], registry=self.registry,
        )  # fmt: skip
        self.cluster_leases = Gauge(
            "gateway_cluster_leases", "Connector leases this process holds (leader, <platform>_shard)",
            ["kind"],
            registry=self.registry,
        )  # fmt: skip
        self.cluster: Info | None = None  # set by in_cluster: one process shows none
        self.redis_connections: RedisConnectionsCollector | None = None  # set by count_redis_connections
        # agent.cache_misses: requests that read less from the provider's cache than they should have.
        self.cache_misses = Counter(
            "herald_cache_miss", "Model requests that missed the prompt cache, by cause", ["cause"],
            registry=self.registry,
        )  # fmt: skip
        self.cache_miss_usd = Counter(
            "herald_cache_miss_usd", "USD the cache misses cost over reading from the cache, by cause",
            ["cause"], registry=self.registry,
        )  # fmt: skip

    def in_cluster(self, instance_id: str) -> None:
        """Show this process's name in the cluster (``gateway_cluster_info{instance_id=...} 1``)."""
        if self.cluster is None:
            self.cluster = Info(
                "gateway_cluster", "This process in a cluster (cluster.redis_url)", registry=self.registry
            )
        self.cluster.info({"instance_id": instance_id})

    def count_tasks(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let ``gateway_asyncio_tasks`` count ``loop``'s tasks when scraped."""
        self.asyncio_tasks.set_function(lambda: len(asyncio.all_tasks(loop)))

    def count_db_connections(self, connections_out: Callable[[], int | None]) -> None:
        """Show ``gateway_db_connections_out`` (a pooled database: PostgreSQL), read when scraped."""
        if self.db_connections_out is None:
            self.db_connections_out = Gauge(
                "gateway_db_connections_out",
                "Database connections taken from this process's pool and not given back yet",
                registry=self.registry,
            )
        self.db_connections_out.set_function(lambda: connections_out() or 0)

    def count_redis_connections(self, read: Callable[[], RedisConnectionFigures]) -> None:
        """Show ``gateway_redis_connections_*`` and ``gateway_redis_pool_wait*`` (cluster mode), read when
        scraped."""
        if self.redis_connections is None:
            self.redis_connections = RedisConnectionsCollector(read)
            self.registry.register(self.redis_connections)  # a collector: it has collect()
        self.redis_connections.read = read

    def count_usage(self, usage: Usage) -> None:
        self.provider_tokens.labels("input").inc(usage.input_tokens)
        self.provider_tokens.labels("output").inc(usage.output_tokens)
        self.provider_tokens.labels("cache_read").inc(usage.cache_read_tokens)
        self.provider_tokens.labels("cache_write").inc(usage.cache_write_tokens)

    def count_cache_miss(self, miss: CacheMiss) -> None:
        self.cache_misses.labels(miss.cause).inc()
        self.cache_miss_usd.labels(miss.cause).inc(miss.missed_usd)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
