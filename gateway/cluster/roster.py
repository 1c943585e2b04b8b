"""Who is in the cluster now, as Redis knows it: the processes that hold their name's claim
(``gateway.cluster.instance``) and the one that holds the leader lease (``gateway.cluster.leader``).

Read-only, for the console's health page; every key read is one of those two kinds, found with
``SCAN`` (never ``KEYS``, which blocks Redis).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.cluster.instance import claim_key, describe
from gateway.cluster.leader import LEADER_KEY


@dataclass(frozen=True)
class Member:
    instance_id: str
    where: str  # "host box1, pid 4242"
    expires_in: float  # seconds the claim lives without renewal


@dataclass(frozen=True)
class Roster:
    members: list[Member]
    leader: str | None  # the instance id holding the leader lease; None between terms


async def read_roster(redis: Redis) -> Roster:
    """The processes claiming a name and the leader; raises redis-py's errors when Redis cannot be reached."""
    prefix = claim_key("")
    members = []
    async for key in redis.scan_iter(match=f"{prefix}*", count=200):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.pttl(key)
            value, ttl = await pipe.execute()
        if value is not None:
            members.append(Member(str(key)[len(prefix) :], describe(str(value)), max(0, int(ttl)) / 1000))
    leader = await redis.get(LEADER_KEY)
    return Roster(
        sorted(members, key=lambda member: member.instance_id),
        str(leader).rpartition("/")[0] if leader else None,
    )
