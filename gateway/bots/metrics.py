"""``/metrics`` of a process serving several bots: each bot's metrics, every sample labelled ``bot``.

Each bot's core keeps its own :class:`GatewayMetrics` (its queue depth, its outbox, its session leases
are its own); Prometheus wants one family per name, so the families of the same name are merged and
their samples told apart by the ``bot`` label (sum them in a query for the process's total).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from gateway.server.metrics import GatewayMetrics


class BotsMetrics:
    """Renders like :class:`GatewayMetrics` (what the HTTP server asks of it), from several bots'."""

    def __init__(self, bots: Mapping[str, GatewayMetrics]) -> None:
        self.bots = dict(bots)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)  # a collector: it has collect()

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for bot, metrics in self.bots.items():
            for family in metrics.registry.collect():
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit)
                )
                merged.samples.extend(
                    Sample(s.name, {"bot": bot, **s.labels}, s.value, s.timestamp, s.exemplar)
                    for s in family.samples
                )
        yield from families.values()

    def render(self) -> bytes:
        return generate_latest(self.registry)
