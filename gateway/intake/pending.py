"""Work on a stored message runs under its chat's session lease, and only while the message is pending.

Several workers may be handed the same message: a cluster's queue hands an entry to another process
after its worker died, and rebuilding the queue from the inbox adds entries that may already exist.
The session lease lets one of them in at a time; checking the row's state *inside* the lease lets the
later ones see that it was answered meanwhile, so a message is answered once and a turn never runs
twice on one history. (In one process the lanes already run a message once; the check costs one read.)
The transaction that queues an answer closes its row only while it is pending
(``gateway.ledger.inbox.finish_row``): the last word should two workers race past this check anyway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agent.api import Lease, SessionLocks
from gateway.ledger.inbox import Inbox, InboxRow, InboxState, NoLongerPending


@asynccontextmanager
async def hold_pending(locks: SessionLocks, inbox: Inbox, row: InboxRow) -> AsyncIterator[Lease]:
    """Hold the lease of ``row``'s chat; raises :class:`NoLongerPending` (holding nothing) when the row
    was closed by the time the lease was granted."""
    async with locks.hold(row.session_key) as lease:
        current = await inbox.get(row.id)
        if current is None or current.state is not InboxState.PENDING:
            raise NoLongerPending(row.id)
        yield lease
