"""What a turn reads of the gateway, as protocols: the conversation names its collaborators, the wiring
hands them in (``gateway.wiring.services.Services`` and its ``Runtime`` satisfy every one).

- :class:`AgentRuntime`: the agent and what it runs on, as turns and reviews use them;
- :class:`TurnServices`: what every turn uses, whichever way it came in (a chat's message, a request of
  the OpenAI-compatible API, a scheduled job): the envelope's collaborators (``gateway.conversation.
  envelope``) and the authorizer whose rights a turn runs with; the API and cron extend it;
- :class:`ChatServices`: what a chat's turn adds (``gateway.conversation.turns``): its adapters, the
  reply road, its attachments, voice notes, approvals and the chat's settings.

So the conversation stands on a floor below the wiring, which builds on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from adapters.base import Adapter
from agent.api import (
    Agent,
    SessionLocks,
    SessionRecord,
    SessionSpec,
    SessionStore,
    StartedSession,
    ToolRegistry,
)
from gateway.access.auth import Authorizer
from gateway.approvals.service import Approvals
from gateway.budgets.service import Budgets
from gateway.config import HeraldConfig
from gateway.conversation.chat_settings import ChatSettings
from gateway.conversation.media import MediaReader
from gateway.delivery.pacing import SendPacing
from gateway.delivery.replies import Replies
from gateway.intake.turn_cap import TurnCap
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Outbox
from gateway.server.metrics import GatewayMetrics
from gateway.speech.replies import SpokenReplies


class AgentRuntime(Protocol):
    """The agent and what it runs on, as the gateway's turns and reviews use them."""

    @property
    def config(self) -> HeraldConfig: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def registry(self) -> ToolRegistry: ...
    @property
    def locks(self) -> SessionLocks: ...
    @property
    def agent(self) -> Agent: ...

    async def new_session(
        self, spec: SessionSpec, *, provider: str | None = None, model: str | None = None
    ) -> StartedSession:
        """Build and store a new session's prompt, for ``provider``/``model`` or the configured model."""


class TurnReviews(Protocol):
    """The background reviews (``gateway.conversation.reviews.Reviews``), as turns use them."""

    def cancel(self, session_key: str) -> None:
        """Stop the session's review: a live turn never waits for one."""

    async def after_turn(self, session: SessionRecord) -> None:
        """Start the session's review when it is due."""


class TurnServices(Protocol):
    """What every turn reads, whichever way it came in."""

    @property
    def runtime(self) -> AgentRuntime: ...
    @property
    def budgets(self) -> Budgets: ...
    @property
    def turns(self) -> TurnCap: ...
    @property
    def reviews(self) -> TurnReviews: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def authorizer(self) -> Authorizer: ...


class ChatServices(TurnServices, Protocol):
    """What a chat's turn reads besides: its platform's adapter, the reply road, the chat's settings."""

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...
    @property
    def replies(self) -> Replies: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def pacing(self) -> SendPacing: ...
    @property
    def chat_settings(self) -> ChatSettings: ...
    @property
    def media(self) -> MediaReader: ...
    @property
    def speech(self) -> SpokenReplies: ...
    @property
    def approvals(self) -> Approvals: ...
    @property
    def stream_interval(self) -> float: ...

    def prompt_hint(self, platform: str) -> str:
        """How the model should write on ``platform``."""
