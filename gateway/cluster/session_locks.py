"""Session leases in Redis with fencing tokens: one turn at a time per session, on every machine.

:class:`RedisSessionLocks` keeps the :class:`agent.locks.SessionLocks` contract. Within a process the
local lock serves waiters in arrival order (as :class:`agent.locks.LocalSessionLocks`); across
processes the holder of the local lock takes a lease in Redis:

- the lease is the key ``herald:lease:session:<key>`` holding this instance's ``owner``, with a TTL of
  ``lease_ttl`` (a :class:`gateway.cluster.lease.RedisLease`: taken when free or already ours, so a
  retried command never finds itself as "another holder");
- while the block runs it is renewed every ``renew_every`` seconds (a third of the TTL) by a
  :class:`resilience.renewal.Renewer` (a renewal that fails is tried again); a lease found held by
  another owner cancels the holder task (the block ends rather than overlap the new holder's); a lease
  found gone (it expired while Redis could not be reached, or Redis restarted empty) is taken again,
  unless the database shows that another holder had the session meanwhile (then the holder is cancelled
  too);
- it is released on exit by compare-and-delete, so a lease that was taken over is left alone; a
  release that cannot reach Redis is left to expire;
- a waiter polls with growing pauses and is told once (``on_wait``; ``agent.locks.wait_to_take``).

Each acquisition takes a fencing token from the database (:func:`agent.storage.fencing.issue_token`)
right after winning the Redis lease; the lease carries it, and the store refuses the holder's writes
once a newer holder took a token (``agent.storage.fencing``). So a holder that was paused past its
lease and wakes up cannot append to the history nor queue a reply, whatever Redis says or forgot. What
the store cannot fence (an edit streamed to a platform) asks ``Lease.trusted``: by this process's own
clock, the lease is trusted until ``lease_ttl`` after the last acquire or renewal *sent* (so never
after Redis may have let it lapse), and not at all from the moment the connection to Redis breaks
(:meth:`RedisSessionLocks.suspect`, called by ``gateway.cluster.watch``: a Redis that restarts empty
forgets every lease, and another process may take the session as soon as it is back) until a renewal,
made at once and then every 0.2 s, finds the lease still (or again) this holder's — or finds another's,
and the holder is cancelled.

Failures: :class:`gateway.cluster.redis.RedisUnavailable` when Redis cannot be reached while waiting
(the caller retries later, as for a database that is away); ``StorageUnavailable`` when the token
cannot be taken (the lease is given back first).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass

from redis.asyncio import Redis

from agent.locks import LocalSessionLocks, WaitNotice, wait_to_take
from agent.storage.base import Storage
from agent.storage.errors import StorageError
from agent.storage.fencing import issue_token, newest_token
from gateway.cluster.lease import RedisLease
from gateway.cluster.redis import RedisUnavailable, redis_key
from resilience.renewal import Loss, Policy, Renewal, Renewer

log = logging.getLogger(__name__)


def lease_key(session_key: str) -> str:
    return redis_key("lease", "session", session_key)


def lease_owner(instance_id: str) -> str:
    """An owner name for one lock instance: the instance and a random part (two processes configured
    with the same ``cluster.instance_id`` still never mistake each other's leases for their own)."""
    return f"{instance_id}:{secrets.token_hex(4)}"


def session_policy(lease_ttl: float, renew_every: float | None = None) -> Policy:
    """Trusted for a TTL after each renewal was sent, not at all once the connection to Redis broke;
    never given up by the holder's clock alone (the database fences its writes)."""
    return Policy(lease_ttl, every=renew_every, trust=lease_ttl, distrust_on_break=True)


@dataclass(eq=False)
class _SessionLease:
    """One held session's lease, as its renewer sees it: a lease Redis forgot is taken again, unless the
    database shows that another holder had the session since this one's ``token``."""

    key: str
    lease: RedisLease
    storage: Storage
    token: int | None = None
    holding: asyncio.Task[object] | None = None

    async def renew(self) -> Renewal:
        renewal = await self.lease.renew()
        if renewal is Renewal.RETAKEN and not await self._still_newest():
            await self.let_go()  # the lease set a moment ago is not ours to keep
            return Renewal.LOST
        return renewal

    def lost(self, _: Loss) -> None:
        log.error("the lease of session %s was taken over by another process; stopping", self.key)
        if self.holding is not None:
            self.holding.cancel()

    async def _still_newest(self) -> bool:
        """Whether nobody took the session since ``token`` (the database knows; Redis may have forgotten).
        A database that cannot be read says yes: the holder goes on, its writes are fenced anyway."""
        try:
            newest = await newest_token(self.storage, self.key)
        except StorageError as error:
            log.warning("session %s: the fencing token could not be read (%s)", self.key, error)
            return True
        return newest is None or self.token is None or newest <= self.token

    async def let_go(self) -> None:
        """Release the lease if it is still ours; one that cannot be released expires within the TTL."""
        try:
            await self.lease.release()
        except RedisUnavailable as error:
            log.warning("the lease of session %s was not released (%s); it expires by itself", self.key,
                        error)  # fmt: skip


class RedisSessionLocks(LocalSessionLocks):
    """Local locks plus a fenced lease per key in Redis: one holder per key among every process that
    shares the Redis, and no write from a holder that lost its lease."""

    def __init__(
        self,
        redis: Redis,
        storage: Storage,
        *,
        owner: str,
        lease_ttl: float,
        renew_every: float | None = None,
    ) -> None:
        super().__init__()
        self.owner = owner
        self._redis = redis
        self._storage = storage
        self._ttl = lease_ttl
        self.policy = session_policy(lease_ttl, renew_every)
        self._held: dict[str, tuple[_SessionLease, Renewer]] = {}  # key -> its lease (from the first try)

    def suspect(self) -> None:
        """The connection to Redis broke: Redis may have forgotten every lease. None is trusted (nothing
        is streamed under it) until a renewal, made at once, confirms it. Returns at once."""
        for _, renewer in self._held.values():
            renewer.suspect()

    @property
    def held(self) -> int:
        return len(self._held)

    async def _acquire_shared(
        self, key: str, deadline: float | None, on_wait: WaitNotice | None
    ) -> int | None:
        session = _SessionLease(
            key, RedisLease(self._redis, lease_key(key), self.owner, self._ttl, retake=True), self._storage
        )
        renewer = Renewer(session, self.policy, name=f"the lease of session {key}", on_lost=session.lost)
        attempt = renewer.attempt()

        async def take() -> str | None:
            nonlocal attempt
            attempt = renewer.attempt()
            try:
                holder = await session.lease.take()
            except asyncio.CancelledError:  # Redis may have set the lease before the answer came back
                await asyncio.shield(session.let_go())
                raise
            return None if holder is None else holder.value

        self._held[key] = session, renewer  # from the first try: a connection break from now on is heard
        try:
            await wait_to_take(key, take, deadline, on_wait)
        except BaseException:
            del self._held[key]
            raise
        renewer.confirm(attempt)  # unless the connection broke meanwhile: then it is renewed at once
        try:
            session.token = await issue_token(self._storage, key)
        except BaseException:
            del self._held[key]
            await asyncio.shield(session.let_go())
            raise
        session.holding = asyncio.current_task()
        renewer.start()
        return session.token

    def _trusted(self, key: str) -> bool:
        held = self._held.get(key)
        return held is not None and held[1].trusted()

    async def _release_shared(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            session, renewer = held
            await renewer.stop()  # first: nothing renews the lease after it is let go
            await session.let_go()

    async def aclose(self) -> None:
        for key in list(self._held):
            await self._release_shared(key)
