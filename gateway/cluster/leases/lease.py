"""One lease in the cluster's Redis: a key that holds its holder's value for a TTL unless renewed.

Every lease of the cluster is one of these — the leader's (``leader``), a Discord shard's (``shards``),
a session's (``session_locks``), a chat's review claim (``review_claims``), a process's name
(``instance``); what differs between them is the holder's policy, kept with
:class:`resilience.renewal.Renewer`. The value names the holder and a random part, so a renewal or a
release never touches another holder's lease, and each command is one Lua script (atomic):

- :meth:`RedisLease.take`: set the key with the TTL when it is free, or already this holder's (so a
  command retried after a lost answer never finds itself "another holder"); otherwise the holder and
  how long its lease still lives (``PTTL``: try again just after it expires);
- :meth:`RedisLease.renew`: compare-and-expire; with ``retake``, a lease found gone (it lapsed, or
  Redis restarted empty) is set again (:attr:`~resilience.renewal.Renewal.RETAKEN`);
- :meth:`RedisLease.release`: compare-and-delete; a lease others wait for (``announce``: the leader's,
  a shard's) also publishes its key on :data:`~gateway.cluster.redis.RELEASES`, in the same script, so
  a waiter takes it over at once (``gateway.cluster.watch`` hears it) instead of at its next try;
- :meth:`RedisLease.replace`: compare-and-set, for a holder known to be dead (``instance``).

A Redis that cannot be reached raises :class:`gateway.cluster.redis.RedisUnavailable` (converted here,
at the edge, from redis-py's errors: the one "Redis is away" of the cluster).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.cluster.redis import RELEASES, reaching
from resilience.renewal import Renewal

EXPIRY_MARGIN = 0.02  # seconds after a taken lease's expiry that the next try is made

# KEYS[1] the lease, ARGV[1] the holder's value, ARGV[2] the TTL in ms: nil when taken (or already the
# holder's), else {the holder's value, its PTTL}.
TAKE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return false
end
return {holder, redis.call('PTTL', KEYS[1])}
"""

HELD, LOST, RETAKEN = 1, 0, 2
# KEYS[1] the lease, ARGV[1] the holder's value, ARGV[2] the TTL in ms, ARGV[3] '1' to take a lease found
# gone: HELD (extended), RETAKEN (it had gone: set again) or LOST (another's, or gone and not retaken).
COMPARE_AND_EXPIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder == false and ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""

# KEYS[1] the key, ARGV[1] the holder's value: 1 when deleted, 0 when it holds another's (or nothing).
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS[1] the lease, ARGV[1] the value found, ARGV[2] the new holder's, ARGV[3] the TTL in ms: 1 when
# replaced, 0 when the lease changed since it was read.
COMPARE_AND_SET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""

# KEYS[1] the key, ARGV[1] the holder's value, ARGV[2] the channel: COMPARE_AND_DELETE, and the key
# published on the channel when it was deleted.
COMPARE_DELETE_AND_ANNOUNCE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
return 0
"""

_RENEWALS = {HELD: Renewal.HELD, RETAKEN: Renewal.RETAKEN, LOST: Renewal.LOST}


@dataclass(frozen=True)
class Holder:
    """Who holds a lease that could not be taken, and for how much longer."""

    value: str
    expires_in: float | None  # seconds until it lapses; None: it has no TTL (not one of Herald's)

    def retry_in(self, interval: float) -> float:
        """How long to wait before trying again: until just after it lapses, at most ``interval``."""
        if self.expires_in is None:
            return interval
        return min(interval, self.expires_in + EXPIRY_MARGIN)


def holder_value(instance_id: str) -> str:
    """A value for a lease of this process: its name and a random part (two holders in one process, or
    two processes given one name, never mistake each other's leases for their own)."""
    return f"{instance_id}/{secrets.token_hex(8)}"


def milliseconds(seconds: float) -> int:
    """A TTL in whole milliseconds for ``PX``/``PEXPIRE`` (at least 1)."""
    return max(1, round(seconds * 1000))


class RedisLease:
    """The lease ``key`` held as ``value`` for ``ttl`` seconds (see the module); ``announce``: its
    release is published on :data:`~gateway.cluster.redis.RELEASES`."""

    def __init__(
        self, redis: Redis, key: str, value: str, ttl: float, *, retake: bool = False, announce: bool = False
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"a lease's ttl must be positive (got {ttl})")
        self.redis = redis
        self.key = key
        self.value = value
        self.ttl = ttl
        self.retake = retake
        self._take = redis.register_script(TAKE)
        self._renew = redis.register_script(COMPARE_AND_EXPIRE)
        self.announce = announce
        self._release = redis.register_script(COMPARE_DELETE_AND_ANNOUNCE if announce else COMPARE_AND_DELETE)
        self._replace = redis.register_script(COMPARE_AND_SET)

    async def take(self) -> Holder | None:
        """Take the lease if it is free (or already ours): None; else who holds it."""
        with reaching(self.redis):
            found = await self._take(keys=[self.key], args=[self.value, milliseconds(self.ttl)])
        if found is None:
            return None
        value, pttl = found
        return Holder(str(value), None if int(pttl) < 0 else int(pttl) / 1000)

    async def renew(self) -> Renewal:
        """Extend the lease if it is still ours (or, with ``retake``, set it again if it is gone)."""
        args: list[str | int] = [self.value, milliseconds(self.ttl), "1" if self.retake else "0"]
        with reaching(self.redis):
            state = await self._renew(keys=[self.key], args=args)
        return _RENEWALS[int(state)]

    async def release(self) -> bool:
        """Delete the lease if it is still ours (and announce it, with ``announce``); whether it was."""
        args = [self.value, RELEASES] if self.announce else [self.value]
        with reaching(self.redis):
            return bool(await self._release(keys=[self.key], args=args))

    async def replace(self, seen: str) -> bool:
        """Take over the lease from the holder ``seen`` (known to be gone) unless it changed since."""
        with reaching(self.redis):
            args: list[str | int] = [seen, self.value, milliseconds(self.ttl)]
            return bool(await self._replace(keys=[self.key], args=args))

    async def holder(self) -> str | None:
        """Who holds the lease now (None: nobody)."""
        with reaching(self.redis):
            value = await self.redis.get(self.key)
        return None if value is None else str(value)
