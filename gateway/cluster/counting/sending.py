"""How this process sends: alone (local pacing, no claims) or as one of a cluster (``cluster.redis_url``:
the pacing shared in Redis, outbox items claimed). Built by ``gateway.wiring.core.open_chat_core``; imports
nothing of Redis unless there is a cluster (one process needs none)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.base import Adapter, ChatAddress, SendRate
from gateway.delivery.pacing import LocalSendPacing, SendPacing
from gateway.ledger.outbox import Claimant
from gateway.server.metrics import GatewayMetrics

if TYPE_CHECKING:
    from gateway.cluster.counting.pacing import RatesFor
    from gateway.cluster.redis import Cluster


@dataclass(frozen=True)
class Sending:
    pacing: SendPacing
    claimant: Claimant | None  # None: the only process sending its chats, nothing is claimed


def sending(cluster: Cluster | None, adapters: Mapping[str, Adapter], metrics: GatewayMetrics) -> Sending:
    """The pacing and claimant for ``adapters``: alone, or as one of ``cluster`` (on its Redis)."""
    if cluster is None:
        return Sending(LocalSendPacing(), None)
    from gateway.cluster.counting.pacing import RedisSendPacing  # redis-py and limits: cluster mode only

    pacing = RedisSendPacing(cluster.redis, published_rates(adapters), metrics)
    settings = cluster.settings
    return Sending(pacing, Claimant(claim_holder(cluster.instance_id), settings.outbox_claim_ttl))


def published_rates(adapters: Mapping[str, Adapter]) -> RatesFor:
    """The limits each adapter publishes for an address (none for a platform this process lacks)."""

    def rates(address: ChatAddress) -> Sequence[SendRate]:
        adapter = adapters.get(address.platform)
        return () if adapter is None else adapter.send_rates(address)

    return rates


def claim_holder(instance_id: str) -> str:
    """The name this process writes into the outbox items it claims: its instance id and a token of this
    start, so a restarted process never takes an old claim for its own."""
    return f"{instance_id}:{secrets.token_hex(4)}"
