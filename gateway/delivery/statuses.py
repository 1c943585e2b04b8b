"""What a platform later says about a message it accepted (``adapters.base.DeliveryStatus``): each
status is recorded on the outbox item that sent the message (``outbox.delivery``: sent, delivered, read
or failed, never moving back), so the console shows how replies fared. A failure also marks the item
failed (so ``gateway_delivery_failures_total`` counts it) and is logged as a warning with the
platform's reason."""

from __future__ import annotations

import logging
import time
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
        changed = await self.outbox.record_deliveries(statuses, time.time())
        for status, recorded in zip(statuses, changed, strict=True):
            if status.status != "failed":
                log.debug("%s message %s: %s", status.platform, status.message_id, status.status)
                continue
            if recorded:
                self.metrics.delivery_failures.labels(platform=status.platform).inc()
            log.warning("%s could not deliver message %s to %s: %s", status.platform, status.message_id,
                        status.chat_id, status.error or "failed")  # fmt: skip
