"""The gateway's services, built once by ``gateway.app`` and handed to the router, turns and commands.

A plain bundle (no behaviour) so that every part gets its collaborators explicitly instead of reaching
for module-level state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from adapters.base import Adapter
from gateway.auth import Authorizer
from gateway.budget import SendBudget
from gateway.chat_settings import ChatSettings
from gateway.config import GatewaySettings
from gateway.inbox import Inbox
from gateway.media import MediaReader
from gateway.metrics import GatewayMetrics
from gateway.outbox import Outbox
from gateway.pairing import Pairing
from gateway.replies import Replies
from gateway.reviews import Reviews
from gateway.runtime import Runtime
from gateway.sender import OutboxSender
from gateway.work import WorkQueue


@dataclass
class Services:
    runtime: Runtime
    settings: GatewaySettings
    inbox: Inbox
    outbox: Outbox
    sender: OutboxSender
    replies: Replies  # the one road for queueing a reply
    adapters: Mapping[str, Adapter]
    budget: SendBudget
    authorizer: Authorizer
    pairing: Pairing
    chat_settings: ChatSettings
    lanes: WorkQueue  # each chat's queue of work (gateway.lanes, or the cluster's); run by gateway.worker
    reviews: Reviews
    media: MediaReader
    metrics: GatewayMetrics
    started_at: float = field(default_factory=time.time)
    console_url: str | None = None  # the operator console's address, once the HTTP server serves it

    @property
    def stream_interval(self) -> float:
        return self.settings.stream_edit_interval
