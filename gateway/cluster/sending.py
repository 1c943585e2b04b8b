"""How this process sends: alone (a local budget, no claims) or as one of a cluster (``cluster.redis_url``:
the budget shared in Redis, outbox items claimed). Built by ``gateway.core.open_core``."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from adapters.base import Adapter, ChatAddress, SendRate
from gateway.budget import LocalSendBudget, SendBudget
from gateway.cluster.budget import RatesFor, RedisSendBudget
from gateway.cluster.redis_interim import open_redis
from gateway.config import ClusterSettings
from gateway.home import HeraldHome, from_environment
from gateway.metrics import GatewayMetrics
from gateway.outbox import Claimant


@dataclass(frozen=True)
class Sending:
    budget: SendBudget
    claimant: Claimant | None  # None: the only process sending its chats, nothing is claimed


@asynccontextmanager
async def open_sending(
    settings: ClusterSettings, home: HeraldHome, adapters: Mapping[str, Adapter], metrics: GatewayMetrics
) -> AsyncIterator[Sending]:
    """The budget and claimant for ``adapters``; a cluster's Redis connection is closed on exit."""
    if settings.redis_url is None:
        yield Sending(LocalSendBudget(), None)
        return
    async with open_redis(from_environment(settings.redis_url, "cluster.redis_url", home)) as redis:
        budget = RedisSendBudget(redis, published_rates(adapters), metrics)
        yield Sending(budget, Claimant(claim_holder(settings), settings.outbox_claim_ttl))


def published_rates(adapters: Mapping[str, Adapter]) -> RatesFor:
    """The limits each adapter publishes for an address (none for a platform this process lacks)."""

    def rates(address: ChatAddress) -> Sequence[SendRate]:
        adapter = adapters.get(address.platform)
        return () if adapter is None else adapter.send_rates(address)

    return rates


def claim_holder(settings: ClusterSettings) -> str:
    """The name this process writes into the outbox items it claims: its instance id (host-pid by
    default) and a token of this start, so a restarted process never takes an old claim for its own."""
    instance = settings.instance_id or f"{socket.gethostname()}-{os.getpid()}"
    return f"{instance}:{secrets.token_hex(4)}"
