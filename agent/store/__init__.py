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
(``store.messages.load``). The few forwarders left are the gateway's reads, kept until its callers use
the repositories too (nothing here touches the database).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.db.base import Storage
from agent.media.budget import MediaLoad
from agent.store.audit import AuditLog
from agent.store.batches import BatchRequests
from agent.store.cache_misses import CacheMiss, CacheMissLog, MissTotal
from agent.store.messages import Messages, SearchHit
from agent.store.reviews import ReviewSchedule
from agent.store.sessions import NewSession, SessionRecord, Sessions
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

    # -- sessions -----------------------------------------------------------------------------

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self.sessions.get(session_id)

    async def latest_session(self, session_key: str | None = None) -> SessionRecord | None:
        """The most recently used session, optionally of one session key."""
        return await self.sessions.latest(session_key)

    async def list_sessions(self, limit: int = 50) -> list[SessionRecord]:
        return await self.sessions.recent(limit)

    async def sessions_for(self, session_key: str, limit: int = 1000) -> list[SessionRecord]:
        """The sessions of one chat, most recently used first."""
        return await self.sessions.of_key(session_key, limit)

    # -- messages -----------------------------------------------------------------------------

    async def media_load(self, session_id: str) -> MediaLoad:
        """What the files still in the conversation add to every request (:meth:`Messages.media_load`)."""
        return await self.messages.media_load(session_id)

    async def search(
        self,
        query: str,
        limit: int = 10,
        *,
        session_key: str | None = None,
        current_session: str | None = None,
    ) -> list[SearchHit]:
        """Full-text search (:meth:`Messages.search`): one chat's sessions with ``session_key``."""
        return await self.messages.search(
            query, limit, session_key=session_key, current_session=current_session
        )

    # -- usage --------------------------------------------------------------------------------

    async def usage_by_purpose(self, session_key: str | None = None) -> list[PurposeUsage]:
        return await self.usage.by_purpose(session_key)

    # -- cache misses (agent.cache_misses) ------------------------------------------------------

    async def cache_misses_of_requests(self, session_key: str, request_ids: Sequence[int]) -> list[CacheMiss]:
        """The cache-miss events of one chat on the given requests (``requests`` rows), oldest first."""
        return await self.cache_misses.of_requests(session_key, request_ids)

    async def cache_miss_totals(
        self, since: float | None = None, until: float | None = None, session_key: str | None = None
    ) -> list[MissTotal]:
        """Cache misses by cause in ``[since, until)``, of one chat or all, the most expensive first."""
        return await self.cache_misses.totals(since, until, session_key)

    async def cache_miss_totals_by_session(self, session_ids: Sequence[str]) -> dict[str, list[MissTotal]]:
        """Cache misses by cause for each of ``session_ids`` that had any."""
        return await self.cache_misses.totals_by_session(session_ids)

    # -- review schedule ----------------------------------------------------------------------

    async def turns_since_review(self, session_id: str) -> int:
        return await self.reviews.turns_since_review(session_id)

    async def idle_unreviewed(self, idle_since: float, active_after: float) -> list[SessionRecord]:
        return await self.reviews.idle_unreviewed(idle_since, active_after)
