"""What running a lane's work means: one function from :class:`gateway.work.Work` to its effect.

A stored message becomes a turn of the agent (``gateway.turns.answer``) or, for a slash command that
touches the session (``/new``, ``/compress`` ...), the command's reply. The message is read from the
inbox by id when the work runs; a row that is no longer pending (answered by an earlier run, cancelled
by a terminal that exited) is skipped.
"""

from __future__ import annotations

import logging

from gateway.commands import answer_command
from gateway.inbox import InboxState
from gateway.services import Services
from gateway.turns import answer
from gateway.work import Work, WorkKind

log = logging.getLogger(__name__)


class Worker:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def run(self, work: Work) -> None:
        """Do ``work``; never raises but for cancellation (``answer`` and ``answer_command`` say why)."""
        row = await self.services.inbox.get(work.inbox_id)
        if row is None or row.state is not InboxState.PENDING:
            log.info("inbox %d: no longer pending; nothing to do", work.inbox_id)
            return
        if work.kind is WorkKind.COMMAND:
            await answer_command(self.services, row)
        else:
            await answer(self.services, row, resumed=work.resumed)
