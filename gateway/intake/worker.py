"""What running a lane's work means: one function from :class:`gateway.intake.work.Work` to its effect.

A stored message becomes a turn of the agent or, for a slash command that touches the session (``/new``,
``/compress`` ...), the command's reply: the handlers (``gateway.intake.handling``) make them. The
message is read from the inbox by id when the work runs; a row that is no longer pending (answered by
an earlier run, cancelled by a terminal that exited) is skipped, also when that is found only once the
chat's lease is held (``gateway.intake.pending``: another worker answered it meanwhile).

A database that cannot be reached is a state, not a failure: the work waits (``gateway.intake.outage``:
backing off up to 30 s between tries, for as long as it takes) and runs again once the database is
back, as a resumed attempt, so whatever the interrupted try already stored is found and not repeated.
A Redis that cannot be reached (``RedisUnavailable``, a kind of ``StorageUnavailable``) is waited out
the same way.

Work whose session another process took over (this one stalled past its lease: ``FencedOut``) is
abandoned: nothing of it was stored after the takeover, and the process that has the session now
answers the message.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from functools import partial

from agent.db import FencedOut, StorageUnavailable
from gateway.intake.handling import Handlers, IntakeServices
from gateway.intake.lanes import INTERRUPTED
from gateway.intake.outage import until_reachable
from gateway.intake.work import Work, WorkKind
from gateway.ledger.inbox import InboxState, NoLongerPending

log = logging.getLogger(__name__)


class Worker:
    def __init__(self, services: IntakeServices, handlers: Handlers) -> None:
        self.services = services
        self.handlers = handlers

    async def run(self, work: Work) -> None:
        """Do ``work``; never raises but for cancellation (the handlers say why).

        Cancelled as :data:`INTERRUPTED` (``/stop``, a newer message) before the turn itself could close
        the row (waiting for the chat's lease, reading media ...), the row is closed as cancelled here:
        the person asked for it to stop, so it is not answered later."""
        try:
            await self._run(work)
        except asyncio.CancelledError as cancel:
            if cancel.args and cancel.args[0] == INTERRUPTED:
                await asyncio.shield(self._close_stopped(work.inbox_id))
            raise

    async def _close_stopped(self, inbox_id: int) -> None:
        services = self.services
        try:
            row = await services.inbox.get(inbox_id)
            if row is not None and row.state is InboxState.PENDING:
                await services.replies.queue([], row=row, state=InboxState.CANCELLED)
                services.metrics.turns.labels("cancelled").inc()
        except StorageUnavailable as error:
            log.warning("inbox %d was stopped but stays pending: %s", inbox_id, error)
        except (NoLongerPending, FencedOut):
            pass  # closed meanwhile, or the session is another process's: nothing of ours to close

    async def _run(self, work: Work) -> None:
        await until_reachable(partial(self._attempt, work), f"inbox {work.inbox_id}")

    async def _attempt(self, work: Work, again: bool) -> None:
        if again:
            work = replace(work, resumed=True)  # the interrupted try may have stored part of it
        try:
            await self._run_once(work)
        except NoLongerPending:
            log.info("inbox %d: answered by another worker meanwhile; nothing to do", work.inbox_id)
        except FencedOut as error:
            log.warning("inbox %d: abandoned: %s", work.inbox_id, error)

    async def _run_once(self, work: Work) -> None:
        row = await self.services.inbox.get(work.inbox_id)
        if row is None or row.state is not InboxState.PENDING:
            log.info("inbox %d: no longer pending; nothing to do", work.inbox_id)
            return
        if work.kind is WorkKind.COMMAND:
            await self.handlers.answer_command(row)
        else:
            await self.handlers.answer(row, resumed=work.resumed)
