"""The gateway's services, built once by ``gateway.app`` and handed to the router, turns and commands.

A plain bundle (no behaviour) so that every part gets its collaborators explicitly instead of reaching
for module-level state.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from adapters.base import Adapter
from gateway.access.auth import Authorizer
from gateway.access.pairing import Pairing
from gateway.budgets.service import Budgets
from gateway.config import GatewaySettings
from gateway.conversation.chat_settings import ChatSettings
from gateway.conversation.media import MediaReader
from gateway.conversation.reviews import Reviews
from gateway.delivery.outbox import Outbox
from gateway.delivery.replies import Replies
from gateway.delivery.send_budget import SendBudget
from gateway.delivery.sender import OutboxSender
from gateway.intake.inbox import Inbox
from gateway.intake.work import WorkQueue
from gateway.runtime import Runtime
from gateway.server.metrics import GatewayMetrics
from gateway.speech.replies import SpokenReplies


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
    lanes: WorkQueue  # each chat's queue of work (gateway.intake.lanes, or the cluster's), run by its worker
    reviews: Reviews
    media: MediaReader
    metrics: GatewayMetrics
    budgets: Budgets  # spend limits: whom to charge, what to tell (gateway.budgets)
    speech: SpokenReplies  # which answers come back as voice notes, and making them (gateway.speech)
    started_at: float = field(default_factory=time.time)
    console_url: str | None = None  # the operator console's address, once the HTTP server serves it

    @property
    def stream_interval(self) -> float:
        return self.settings.stream_edit_interval
