"""A chat's order in a cluster comes from the stored inbox, not from the queue.

Two entries of one chat may be read by two processes at once, and entries may be delivered again or
twice (a claimed entry, a rebuilt queue). So an entry does not say "run this message" but "chat K has
work up to inbox id N": whoever runs it answers K's *oldest* pending lane message first, then the next,
until nothing of K up to N is pending. Each answer runs under K's session lease and re-checks under it
that its row is still pending (``gateway.intake.pending``), so:

- a later message never overtakes an earlier one (the earlier one is always picked first, and a closed
  row never becomes pending again);
- two workers picking the same row answer it once (the second finds it closed under the lease);
- an entry whose rows are all closed is simply acknowledged.

Messages answered outside the lane (a refusal, ``/stop``, ``/status``) are not lane work and are skipped
here: they never wait for a chat's turn. (Two messages of one chat stored at the same instant by two
processes are ordered by their ids, which is the order they are answered in.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.intake.work import Work, WorkKind
from gateway.ledger.inbox import Inbox, InboxRow

KindOf = Callable[[InboxRow], WorkKind | None]  # a row's lane work, or None (answered outside the lane)


class ChatOrder:
    def __init__(self, inbox: Inbox, kind_of: KindOf) -> None:
        self.inbox = inbox
        self.kind_of = kind_of

    async def next_work(self, session_key: str, up_to: int) -> Work | None:
        """The oldest pending lane work of ``session_key`` with an inbox id up to ``up_to``; None when
        there is none. ``resumed`` is left False: the caller knows whether the row was tried before."""
        for row in await self.inbox.pending_of(session_key, up_to):
            kind = self.kind_of(row)
            if kind is not None:
                return Work(kind, session_key, row.id)
        return None

    async def stored_work(self, older_than: float = 0.0) -> list[Work]:
        """Every pending lane message received at least ``older_than`` seconds ago, oldest first, as
        resumed work (a run may have started it): what the queue must hold, rebuilt from the database."""
        cutoff = time.time() - older_than
        return [
            Work(kind, row.session_key, row.id, resumed=True)
            for row in await self.inbox.pending()
            if row.received_at <= cutoff and (kind := self.kind_of(row)) is not None
        ]
