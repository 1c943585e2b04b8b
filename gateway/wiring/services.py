"""The gateway's services, built once by the chat core (``gateway.wiring.core``) and handed to the
router, turns, commands, cron, the API and the console.

A plain bundle (no behaviour beyond reading it) so that every part gets its collaborators explicitly
instead of reaching for module-level state. No part below the wiring imports it: each takes a narrow
context of its own, a protocol naming what it reads (``gateway.conversation.context``,
``gateway.intake.handling``, ``gateway.cron.runner.CronServices``, ``gateway.commands.CommandServices``,
``gateway.console.pages.ConsoleServices``, ``gateway.openai_api.server.ApiServices``), which this bundle
satisfies.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from adapters.base import Adapter
from gateway.access.auth import Authorizer
from gateway.access.pairing import Pairing
from gateway.approvals.service import Approvals
from gateway.budgets.service import Budgets
from gateway.config import GatewaySettings
from gateway.conversation.chat_settings import ChatSettings
from gateway.conversation.media import MediaReader
from gateway.conversation.reviews import Reviews
from gateway.delivery.pacing import SendPacing
from gateway.delivery.replies import Replies
from gateway.delivery.sender import OutboxSender
from gateway.intake.turn_cap import TurnCap
from gateway.intake.work import WorkQueue
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Outbox
from gateway.server.metrics import GatewayMetrics
from gateway.speech.replies import SpokenReplies
from gateway.wiring.runtime import Runtime


@dataclass
class Services:
    runtime: Runtime
    settings: GatewaySettings
    inbox: Inbox
    outbox: Outbox
    sender: OutboxSender
    replies: Replies  # the one road for queueing a reply
    adapters: Mapping[str, Adapter]
    pacing: SendPacing
    authorizer: Authorizer
    pairing: Pairing
    chat_settings: ChatSettings
    lanes: WorkQueue  # each chat's queue of work (gateway.intake.lanes, or the cluster's), run by its worker
    turns: TurnCap  # the one cap on turns at once: chats', the API's and cron's (gateway.intake.turn_cap)
    reviews: Reviews
    media: MediaReader
    metrics: GatewayMetrics
    budgets: Budgets  # spend limits: whom to charge, what to tell (gateway.budgets)
    speech: SpokenReplies  # which answers come back as voice notes, and making them (gateway.speech)
    approvals: Approvals  # commands held for the owner's yes (gateway.approvals)
    started_at: float = field(default_factory=time.time)
    console_url: str | None = None  # the operator console's address, once the HTTP server serves it

    @property
    def stream_interval(self) -> float:
        return self.settings.stream_edit_interval

    def prompt_hint(self, platform: str) -> str:
        """How the model should write on ``platform`` (its adapter's ``prompt_hint``; none when this
        process has no adapter for it)."""
        adapter = self.adapters.get(platform)
        return adapter.prompt_hint if adapter is not None else ""
