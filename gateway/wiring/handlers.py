"""What intake's stored work becomes, wired: the agent's turn and the command table, each handed the
gateway's services as the narrow view it takes (``gateway.conversation.context.ChatServices``, the
commands' :class:`~gateway.commands.CommandDesk`). Intake knows neither (``gateway.intake.handling``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.api import Charge, CompressionOutcome, StartedSession, charging
from gateway.commands import CommandDesk, answer_command, command_in_lane
from gateway.console.links import LoginLinks
from gateway.conversation.chat_settings import ModelChoice
from gateway.conversation.turns import answer, start_session
from gateway.intake.pending import hold_pending
from gateway.ledger.inbox import InboxRow
from gateway.wiring.services import Services


@dataclass(frozen=True)
class ChatHandlers:
    """The handlers intake hands stored work to (``gateway.intake.handling.Handlers``): the command
    table and the agent's turn."""

    services: Services

    def command_in_lane(self, text: str) -> bool | None:
        return command_in_lane(text)

    async def answer(self, row: InboxRow, *, resumed: bool) -> None:
        await answer(self.services, row, resumed=resumed)

    async def answer_command(self, row: InboxRow) -> None:
        await answer_command(self.services, desk_of(self.services), row)


def desk_of(services: Services) -> CommandDesk:
    """The commands' narrow view of ``services``."""
    runtime = services.runtime

    async def new_session(row: InboxRow) -> StartedSession:
        async with hold_pending(runtime.locks, services.inbox, row) as lease:
            return await start_session(services, lease, row.message)

    async def compress(row: InboxRow, charge: Charge) -> CompressionOutcome | str | None:
        """The chat's session compressed now, charged like the asker's turn; a str: why not (a limit)."""
        async with hold_pending(runtime.locks, services.inbox, row) as lease:
            session = await runtime.store.sessions.latest(row.session_key)
            if session is None:
                return None
            over = await services.budgets.check(charge)
            if over is not None:
                return services.budgets.line(over)
            with charging(charge):
                return await runtime.agent.compress(lease, session)

    async def stop_background(session_key: str) -> int:
        return 0 if runtime.hands is None else await runtime.hands.stop_chat(session_key)

    return CommandDesk(
        store=runtime.store,
        new_session=new_session,
        compress=compress,
        lanes=services.lanes,
        budgets=services.budgets,
        cron=runtime.cron,
        chat_settings=services.chat_settings,
        default_model=ModelChoice(runtime.provider, runtime.model),
        model_info=runtime.config.model_info,
        pairing=services.pairing,
        wake_sender=services.sender.notify,
        console_url=lambda: services.console_url,
        login_links=LoginLinks(runtime.storage),
        started_at=services.started_at,
        approvals=services.approvals,
        stop_background=stop_background,
    )
