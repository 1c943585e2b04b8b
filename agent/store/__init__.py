"""The agent's state: sessions, their messages and files, usage, the review schedule.

Each kind of state is a repository of its own, with its contract in its module:

- :mod:`agent.store.sessions`: sessions (prompt bytes, title, todos, compression state).
- :mod:`agent.store.messages`: messages in order with their files (:mod:`agent.store.media`), search.
- :mod:`agent.store.usage`: per-request usage and the session totals it adds to.
- :mod:`agent.store.spending`: what each scope spent per window (spend limits), who was told.
- :mod:`agent.store.reviews`: which sessions have turns no background review has covered.
- :mod:`agent.store.cache_misses`: cache-miss events, and what recent requests left in the cache.
- :mod:`agent.store.audit`: what the owner's tools ran and who approved it.
- :mod:`agent.store.leases`: the cross-process session leases (used by :mod:`agent.locks`, not here).

:class:`SessionStore` is the one object the agent, tools and gateway are handed: it opens the
repositories on one :class:`~agent.db.base.Storage`, and callers use the repository that owns the call
(``store.messages.load``, ``store.sessions.latest``): no method here forwards to one, so each call
reads where its contract is (nothing here touches the database).
"""

from __future__ import annotations

from agent.db.base import Storage
from agent.store.audit import AuditLog
from agent.store.batches import BatchRequests
from agent.store.cache_misses import CacheMiss, CacheMissLog, MissTotal
from agent.store.messages import Messages, SearchHit
from agent.store.reviews import ReviewSchedule
from agent.store.sessions import NewSession, SessionRecord, Sessions, SessionTotals
from agent.store.spending import SpendLedger
from agent.store.usage import PurposeUsage, UsageLedger

__all__ = [
    "CacheMiss",
    "MissTotal",
    "NewSession",
    "PurposeUsage",
    "SearchHit",
    "SessionRecord",
    "SessionStore",
    "SessionTotals",
]


class SessionStore:
    """The agent's repositories on one storage."""

    def __init__(self, storage: Storage) -> None:
        self.sessions = Sessions(storage)
        self.messages = Messages(storage)
        self.usage = UsageLedger(storage)
        self.reviews = ReviewSchedule(storage)
        self.cache_misses = CacheMissLog(storage)
        self.spending = SpendLedger(storage)
        self.audit = AuditLog(storage)
        self.batches = BatchRequests(storage)
