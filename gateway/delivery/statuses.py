"""What a platform later says about a message it accepted (``adapters.base.DeliveryStatus``): a failure
marks the outbox item that sent it failed (so the console and ``gateway_delivery_failures_total`` show
it) and is logged as a warning with the platform's reason; delivered and read are only logged (debug)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from adapters.base import DeliveryStatus
from gateway.ledger.outbox import Outbox
from gateway.server.metrics import GatewayMetrics

log = logging.getLogger(__name__)


class DeliveryStatuses:
    """The status sink the gateway gives every adapter (``Adapter.status_sink``)."""

    def __init__(self, outbox: Outbox, metrics: GatewayMetrics) -> None:
        self.outbox = outbox
        self.metrics = metrics

    async def __call__(self, statuses: Sequence[DeliveryStatus]) -> None:
        for status in statuses:
            if status.status != "failed":
                log.debug("%s message %s: %s", status.platform, status.message_id, status.status)
                continue
            reason = status.error or "failed"
            changed = await self.outbox.mark_undelivered(
                status.platform, status.chat_id, status.message_id, reason
            )
            if changed:
                self.metrics.delivery_failures.labels(platform=status.platform).inc()
            log.warning("%s could not deliver message %s to %s: %s", status.platform, status.message_id,
                        status.chat_id, reason)  # fmt: skip
