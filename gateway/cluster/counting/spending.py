"""The spend gate's figures in the cluster's Redis: every process checks and reserves against the same
numbers, atomically, in one round trip.

A scope's window is one hash, ``herald:spend:<window>:<scope>``: ``spent`` (what the database says was
spent, kept up to date by every process's settles) and one field per reservation in flight,
``h:<hold>`` = ``<amount>:<expires ms>``. Amounts are whole nano-dollars, so additions are exact.

- A check (:data:`_TAKE`) drops expired reservations, asks every capped key with the rule of
  ``agent.spending.rules.grant`` (mirrored in Lua) what it can pay of the request and, when all can pay
  its least, adds the smallest of their answers as the request's reservation to each: nothing can slip
  between the test and the reservation, whichever process asks. Reservations expire in Redis' own clock
  (``TIME``), so a process that died holds nothing for longer than ``hold_ttl``.
- A settle (:data:`_SETTLE`), run after the cost is committed to PostgreSQL, adds it to ``spent`` of
  the windows Redis has and drops the reservation; so the cost counts in the database before the
  reservation is gone (a moment counted twice, never not at all).
- A window Redis does not have (its first use, or Redis restarted empty) is seeded from the database
  (``HSETNX``: the first seeder wins). A settle that races a seed may be missed by it (one request per
  process at most, while that window is first met in Redis). A window whose settle could not
  reach Redis is seeded again from the database before its next check.

Redis unreachable: a check raises ``RedisUnavailable`` (the work waits, as for a database that is
away); a settle or release is logged and lapses (the reservation expires).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent.api import Capped, Granted, Loader, Shortfall, SpendCounters, SpendKey, Standing
from gateway.cluster.redis import reaching, redis_key
from gateway.cluster.redis_errors import UNREACHABLE

log = logging.getLogger(__name__)

NANO = 1_000_000_000
FAILED: tuple[type[BaseException], ...] = (RedisError, *UNREACHABLE)  # a settle or release that did not land
SEED_ATTEMPTS = 3
DAY_MS = 24 * 3600 * 1000
KEEP_MS = {"day": 3 * DAY_MS, "month": 40 * DAY_MS, "run": 2 * DAY_MS}  # by the window id's kind

# KEYS: the capped windows. ARGV: most (nano), hold TTL (ms), hold id ("" = check only), least (nano),
# then each key's limit (nano). Returns {0, granted} (reserved), {1, i} (key i is not seeded),
# {2, i, spent, reserved} (key i cannot pay the least).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local amount = tonumber(ARGV[1])
local least = tonumber(ARGV[4])
for i, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, 'spent') == 0 then return {1, i} end
end
for i, key in ipairs(KEYS) do
  local spent = tonumber(redis.call('HGET', key, 'spent'))
  local reserved = 0
  local fields = redis.call('HGETALL', key)
  for j = 1, #fields, 2 do
    if string.sub(fields[j], 1, 2) == 'h:' then
      local value = fields[j + 1]
      local sep = string.find(value, ':', 1, true)
      if tonumber(string.sub(value, sep + 1)) <= now then
        redis.call('HDEL', key, fields[j])
      else
        reserved = reserved + tonumber(string.sub(value, 1, sep - 1))
      end
    end
  end
  local left = tonumber(ARGV[4 + i]) - (spent + reserved)
  if left <= 0 or left < least then
    return {2, i, spent, reserved}
  end
  if left < amount then amount = left end
end
if ARGV[3] ~= '' then
  local value = string.format('%d', amount) .. ':' .. string.format('%d', now + tonumber(ARGV[2]))
  for _, key in ipairs(KEYS) do redis.call('HSET', key, 'h:' .. ARGV[3], value) end
end
return {0, amount}
"""

# KEYS: the windows of a request. ARGV: hold id ("" = none), cost (nano).
_SETTLE = """
for _, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, 'spent') == 1 then redis.call('HINCRBY', key, 'spent', ARGV[2]) end
  if ARGV[1] ~= '' then redis.call('HDEL', key, 'h:' .. ARGV[1]) end
end
return 1
"""

# KEYS[1]: a window. ARGV: what the database says it spent (nano), how long to keep it (ms).
_SEED = """
if redis.call('HSETNX', KEYS[1], 'spent', ARGV[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


def nano(usd: float) -> int:
    return round(usd * NANO)


def window_key(key: SpendKey) -> str:
    scope, period = key
    return redis_key("spend", period, scope)


class RedisCounters(SpendCounters):
    def __init__(self, redis: Redis, load: Loader, *, hold_ttl: float) -> None:
        self.redis = redis
        self._load = load
        self.hold_ttl = hold_ttl
        self._take = redis.register_script(_TAKE)
        self._settle = redis.register_script(_SETTLE)
        self._seed = redis.register_script(_SEED)
        self._stale: set[SpendKey] = set()  # a settle missed Redis: seed these again

    async def take(
        self, capped: Sequence[Capped], least: float, most: float, hold: str | None, ttl: float | None = None
    ) -> Granted | Shortfall:
        keys = [window_key(c.key) for c in capped]
        lasts = max(1, int((self.hold_ttl if ttl is None else ttl) * 1000))
        args: list[str | int] = [nano(most), lasts, hold or "", nano(least), *(nano(c.limit) for c in capped)]
        with reaching(self.redis):
            await self._forget_stale(capped)
            for _ in range(SEED_ATTEMPTS):
                answer = [int(value) for value in await self._take(keys=keys, args=args)]
                if answer[0] == 0:
                    return Granted(answer[1] / NANO)
                if answer[0] == 2:
                    found = capped[answer[1] - 1]
                    return Shortfall(found, Standing(answer[2] / NANO, answer[3] / NANO))
                await self._seed_from_database([c.key for c in capped])
        raise RuntimeError(f"the spending windows {keys} could not be seeded in Redis")

    async def _forget_stale(self, capped: Sequence[Capped]) -> None:
        stale = [c.key for c in capped if c.key in self._stale]
        for key in stale:
            await self.redis.hdel(window_key(key), "spent")  # seeded again from the database below
            self._stale.discard(key)

    async def _seed_from_database(self, keys: Sequence[SpendKey]) -> None:
        spent = await self._load(keys)
        for key in keys:
            keep = KEEP_MS.get(key[1].partition(":")[0], KEEP_MS["day"])
            await self._seed(keys=[window_key(key)], args=[nano(float(spent.get(key, 0.0))), keep])

    async def settle(self, hold: str | None, keys: Sequence[SpendKey], cost: float) -> None:
        try:
            await self._settle(keys=[window_key(key) for key in keys], args=[hold or "", nano(cost)])
        except FAILED as error:
            self._stale.update(keys)
            log.warning("could not count a request's cost in Redis (its windows are read from the database "
                        "again before their next check): %s", error)  # fmt: skip

    async def release(self, hold: str, keys: Sequence[SpendKey]) -> None:
        try:
            for key in keys:
                await self.redis.hdel(window_key(key), f"h:{hold}")
        except FAILED as error:
            log.warning("could not release a spend reservation in Redis (it expires on its own): %s", error)
