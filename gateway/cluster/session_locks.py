"""Session leases in Redis with fencing tokens: one turn at a time per session, on every machine.

:class:`RedisSessionLocks` keeps the :class:`agent.locks.SessionLocks` contract. Within a process the
local lock serves waiters in arrival order (as :class:`agent.locks.LocalSessionLocks`); across
processes the holder of the local lock takes a lease in Redis:

- the lease is the key ``herald:lease:session:<key>`` holding this instance's ``owner``, with a TTL of
  ``lease_ttl``; it is taken with a Lua script (free, or already ours: set it), so a retried command
  never finds itself as "another holder";
- while the block runs it is renewed every ``renew_every`` seconds (a third of the TTL); a renewal that
  cannot reach Redis is tried again (and one that fails unexpectedly is logged and goes on:
  ``gateway.cluster.supervision``); a lease found held by another owner cancels the holder task (the
  block ends rather than overlap the new holder's); a lease found gone (it expired while Redis could not
  be reached, or Redis restarted empty) is taken again, unless the database shows that another holder
  had the session meanwhile (then the holder is cancelled too);
- it is released on exit by compare-and-delete (Lua), so a lease that was taken over is left alone; a
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
made at once and then every :data:`SUSPECT_RETRY` seconds, finds the lease still (or again) this
holder's — or finds another's, and the holder is cancelled.

Failures: :class:`gateway.cluster.redis.RedisUnavailable` when Redis cannot be reached while waiting
(the caller retries later, as for a database that is away); ``StorageUnavailable`` when the token
cannot be taken (the lease is given back first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent.locks import LocalSessionLocks, WaitNotice, wait_to_take
from agent.storage.base import Storage
from agent.storage.errors import StorageError
from agent.storage.fencing import issue_token, newest_token
from gateway.cluster.redis import COMPARE_AND_DELETE, RedisUnavailable, reaching, redis_key
from gateway.cluster.supervision import supervised

log = logging.getLogger(__name__)

SUSPECT_RETRY = 0.2  # seconds between renewals of a lease Redis may have forgotten, until one answers

# KEYS[1] lease, ARGV[1] owner, ARGV[2] TTL in ms. Returns nil when taken (or already ours), else the holder.
ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return false
end
return holder
"""

RENEWED, TAKEN_OVER, TAKEN_AGAIN = 1, 0, 2
# Returns RENEWED (ours: extended), TAKEN_AGAIN (it had gone: ours again) or TAKEN_OVER (another owner's).
RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""


def lease_key(session_key: str) -> str:
    return redis_key("lease", "session", session_key)


def lease_owner(instance_id: str) -> str:
    """An owner name for one lock instance: the instance and a random part (two processes configured
    with the same ``cluster.instance_id`` still never mistake each other's leases for their own)."""
    return f"{instance_id}:{secrets.token_hex(4)}"


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
        self._ttl_ms = max(1, round(lease_ttl * 1000))
        self._renew_every = renew_every if renew_every is not None else lease_ttl / 3
        self._acquire = redis.register_script(ACQUIRE)
        self._renew_script = redis.register_script(RENEW)
        self._release = redis.register_script(COMPARE_AND_DELETE)
        self._renewals: dict[str, asyncio.Task[None]] = {}
        self._trusted_until: dict[str, float] = {}  # key -> monotonic time its lease may lapse at
        self._wake: dict[str, asyncio.Event] = {}  # key -> set to renew now (the lease is in doubt)
        self._breaks = 0  # connection breaks so far: an answer to a command sent before one confirms nothing

    def suspect(self) -> None:
        """The connection to Redis broke: Redis may have forgotten every lease. None is trusted (nothing
        is streamed under it) until a renewal, made at once, confirms it. Returns at once."""
        self._breaks += 1
        for key, wake in self._wake.items():
            self._trusted_until[key] = 0.0
            wake.set()

    @property
    def held(self) -> int:
        return len(self._renewals)

    async def _acquire_shared(
        self, key: str, deadline: float | None, on_wait: WaitNotice | None
    ) -> int | None:
        name = lease_key(key)
        sent = 0.0
        breaks = self._breaks

        async def take() -> str | None:
            nonlocal sent, breaks
            sent, breaks = time.monotonic(), self._breaks
            try:
                with reaching(self._redis):
                    holder = await self._acquire(keys=[name], args=[self.owner, self._ttl_ms])
            except asyncio.CancelledError:  # Redis may have set the lease before the answer came back
                await asyncio.shield(self._let_go(key))
                raise
            return None if holder is None else str(holder)

        await wait_to_take(key, take, deadline, on_wait)
        self._wake[key] = asyncio.Event()  # before any await: a break from now on is heard
        self._confirmed(key, sent, breaks)
        try:
            token = await issue_token(self._storage, key)
        except BaseException:
            self._wake.pop(key, None)
            self._trusted_until.pop(key, None)
            await asyncio.shield(self._let_go(key))
            raise
        holding = asyncio.current_task()
        assert holding is not None, "hold() runs in a task"
        renewal = supervised(f"the lease renewal of session {key}", lambda: self._renew(key, token, holding))
        self._renewals[key] = asyncio.get_running_loop().create_task(renewal, name=f"lease renewal {key}")
        return token

    async def _renew(self, key: str, token: int, holding: asyncio.Task[object]) -> None:
        """Keep the lease alive while the block runs; stop the holder once another has the session.

        Ends when the block does: by cancellation, and also by the key's ``_wake`` entry going away
        (:meth:`_release_shared` removes it first), because a cancellation that arrives while redis-py
        is reconnecting can be lost in it, and a renewal that went on would keep the lease for ever."""
        name = lease_key(key)
        wake = self._wake.get(key)
        pause = self._renew_every
        while wake is not None and self._wake.get(key) is wake:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await wake.wait()
            wake.clear()
            if self._wake.get(key) is not wake:
                return
            pause = self._renew_every
            sent, breaks = time.monotonic(), self._breaks
            try:
                with reaching(self._redis):
                    state = await self._renew_script(keys=[name], args=[self.owner, self._ttl_ms])
            except (RedisUnavailable, RedisError) as error:
                log.warning("renewing the lease of session %s failed (%s); trying again", key, error)
                if not self._trusted(key):  # in doubt: confirm it as soon as Redis answers
                    pause = SUSPECT_RETRY
                continue
            if self._wake.get(key) is not wake:  # released meanwhile: _release_shared lets it go
                return
            if state == RENEWED:
                self._confirmed(key, sent, breaks)
                continue
            if state == TAKEN_AGAIN and await self._still_newest(key, token):
                log.warning("the lease of session %s had expired in Redis; taken again", key)
                self._confirmed(key, sent, breaks)
                continue
            log.error("the lease of session %s was taken over by another process; stopping", key)
            if state == TAKEN_AGAIN:
                await self._let_go(key)  # the lease set a moment ago is not ours to keep
            holding.cancel()
            return

    async def _still_newest(self, key: str, token: int) -> bool:
        """Whether nobody took the session since ``token`` (the database knows; Redis may have forgotten).
        A database that cannot be read says yes: the holder goes on, its writes are fenced anyway."""
        try:
            newest = await newest_token(self._storage, key)
        except StorageError as error:
            log.warning("session %s: the fencing token could not be read (%s)", key, error)
            return True
        return newest is None or newest <= token

    def _confirmed(self, key: str, sent: float, breaks: int) -> None:
        """Redis said the lease is ours, to a command sent at ``sent`` when ``breaks`` breaks had been
        seen: trusted for a TTL from then, unless the connection broke since (then renewed at once)."""
        if breaks == self._breaks:
            self._trusted_until[key] = sent + self._ttl_ms / 1000
            return
        self._trusted_until[key] = 0.0
        wake = self._wake.get(key)
        if wake is not None:
            wake.set()

    def _trusted(self, key: str) -> bool:
        return time.monotonic() < self._trusted_until.get(key, 0.0)

    async def _release_shared(self, key: str) -> None:
        self._trusted_until.pop(key, None)
        wake = self._wake.pop(key, None)  # first: the renewal ends even if its cancellation is lost
        renewal = self._renewals.pop(key, None)
        if renewal is not None:
            renewal.cancel()
            if wake is not None:
                wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await renewal  # then nothing renews the lease after it is let go
        await self._let_go(key)

    async def _let_go(self, key: str) -> None:
        """Release the lease if it is still ours; one that cannot be released expires within the TTL."""
        try:
            with reaching(self._redis):
                await self._release(keys=[lease_key(key)], args=[self.owner])
        except (RedisUnavailable, RedisError) as error:
            log.warning("the lease of session %s was not released (%s); it expires by itself", key, error)

    async def aclose(self) -> None:
        for key in list(self._renewals):
            await self._release_shared(key)
