"""The session leases repository: one holder per key, whoever asks at once, on either database."""

from __future__ import annotations

import asyncio

from agent.db.base import Storage
from agent.store.leases import SessionLeases


async def test_of_many_owners_taking_one_key_at_once_exactly_one_gets_it(storage: Storage) -> None:
    leases = SessionLeases(storage)
    owners = [f"host:{n}:x" for n in range(12)]
    results = await asyncio.gather(*(leases.take("chat", owner, 30) for owner in owners))
    winners = [owner for owner, holder in zip(owners, results, strict=True) if holder is None]
    assert len(winners) == 1
    assert await leases.holder("chat") == winners[0]
    assert {holder for holder in results if holder is not None} <= {winners[0], "another process"}


async def test_a_held_lease_is_refused_until_it_expires_or_its_holder_is_gone(storage: Storage) -> None:
    leases = SessionLeases(storage)
    assert await leases.take("chat", "a", 30) is None
    assert await leases.take("chat", "a", 30) is None  # one's own lease: taken again (extended)
    assert await leases.take("chat", "b", 30) == "a"
    assert await leases.take("chat", "b", 30, gone=lambda owner: owner == "a") is None
    assert await leases.holder("chat") == "b"
    assert await leases.take("short", "a", -1) is None  # a lease that expired a second ago
    assert await leases.take("short", "b", 30) is None


async def test_only_the_holder_extends_or_releases(storage: Storage) -> None:
    leases = SessionLeases(storage)
    assert await leases.take("chat", "a", 30) is None
    assert await leases.extend("chat", "a", 30)
    assert not await leases.extend("chat", "b", 30)
    await leases.release("chat", "b")
    assert await leases.holder("chat") == "a"
    await leases.release("chat", "a")
    await leases.release("chat", "a")  # idempotent
    assert await leases.holder("chat") is None
    assert not await leases.extend("chat", "a", 30)  # released: gone for good
    assert await leases.take("chat", "b", 30) is None


async def test_of_many_owners_taking_over_an_expired_lease_exactly_one_gets_it(storage: Storage) -> None:
    leases = SessionLeases(storage)
    assert await leases.take("chat", "crashed", -1) is None  # expired a second ago
    owners = [f"host:{n}:x" for n in range(12)]
    results = await asyncio.gather(*(leases.take("chat", owner, 30) for owner in owners))
    assert sum(holder is None for holder in results) == 1
    assert await leases.holder("chat") in owners
