"""The cluster work queue's figures on ``/metrics``: the queue's lag as seen from this process, and what
this process runs. Registered on the gateway's own registry (``gateway.server.metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from gateway.cluster.queue.work_stream import QueueStats


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.entries = Gauge(
            "gateway_cluster_queue_entries", "Entries in the cluster's work stream", registry=registry
        )
        self.unacknowledged = Gauge(
            "gateway_cluster_queue_pending", "Entries read by a process and not finished yet",
            registry=registry,
        )  # fmt: skip
        self.unread = Gauge(
            "gateway_cluster_queue_unread", "Entries no process has read yet", registry=registry
        )
        self.oldest = Gauge(
            "gateway_cluster_queue_oldest_seconds", "Age of the oldest entry not finished (the queue's lag)",
            registry=registry,
        )  # fmt: skip
        self.running = Gauge(
            "gateway_cluster_running", "Turns and commands this process runs now", registry=registry
        )
        self.redis_up = Gauge(
            "gateway_cluster_redis_up", "1 while this process reaches Redis (it takes work), else 0",
            registry=registry,
        )  # fmt: skip

    def show(self, stats: QueueStats, *, running: int) -> None:
        self.entries.set(stats.length)
        self.unacknowledged.set(stats.pending)
        self.unread.set(stats.unread)
        self.oldest.set(stats.oldest_seconds)
        self.running.set(running)
