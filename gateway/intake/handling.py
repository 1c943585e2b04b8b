"""What intake needs of the rest of the gateway, as protocols: intake stores a message and schedules it
in its chat's lane; the handlers (the agent's turn, the command table) answer it.

Intake knows neither handler: the wiring (``gateway.wiring.handlers``) passes them in. So intake sits on a
floor below the conversation and the commands, which build on it (the inbox, the lanes, ``hold_pending``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from adapters.base import Adapter, ChatAddress
from gateway.access.auth import Authorizer
from gateway.access.pairing import Pairing
from gateway.config import GatewaySettings
from gateway.intake.work import WorkQueue
from gateway.ledger.inbox import Inbox, InboxRow, InboxState
from gateway.ledger.outbox import Outgoing
from gateway.server.metrics import GatewayMetrics


class Handlers(Protocol):
    """What a stored message becomes."""

    def command_in_lane(self, text: str) -> bool | None:
        """None: ``text`` is no slash command (it becomes a turn); True: a command that runs in the
        chat's lane (it touches the session); False: one answered at once, outside the lane."""

    async def answer(self, row: InboxRow, *, resumed: bool) -> None:
        """A turn of the agent answering ``row`` (``resumed``: an earlier try may have stored part)."""

    async def answer_command(self, row: InboxRow) -> None:
        """The reply of the slash command ``row`` holds."""


class ReplyRoad(Protocol):
    """The one road for replies (``gateway.delivery.replies.Replies``), as intake uses it: refusals,
    pairing codes, commands answered at once, and a stopped message closed with no reply."""

    async def answer(
        self,
        row: InboxRow,
        text: str,
        *,
        state: InboxState = ...,
        streamed: Sequence[str] = ...,
        every_part_replies: bool = ...,
    ) -> None: ...

    async def post(self, address: ChatAddress, text: str, *, reply_to: str | None = ...) -> list[int]: ...

    async def queue(
        self, operations: Sequence[Outgoing], *, row: InboxRow | None = ..., state: InboxState | None = ...
    ) -> list[int]: ...


class IntakeServices(Protocol):
    """The collaborators the router and the worker use (``gateway.wiring.services.Services`` has them
    all)."""

    @property
    def settings(self) -> GatewaySettings: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def lanes(self) -> WorkQueue: ...
    @property
    def adapters(self) -> Mapping[str, Adapter]: ...
    @property
    def authorizer(self) -> Authorizer: ...
    @property
    def pairing(self) -> Pairing: ...
    @property
    def replies(self) -> ReplyRoad: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
