"""A Redis that goes away may come back having forgotten every lease (``gateway.cluster.watch``): the
holders hear of the break at once, before anybody could win what Redis forgot, and act on nothing they
hold until Redis confirms it again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gateway.cluster.leases.leader import Leadership
from gateway.cluster.leases.session_locks import lease_key
from gateway.cluster.redis import RELEASES, open_redis
from gateway.cluster.watch import ConnectionWatch
from resilience.renewal import Renewer
from tests.cluster.test_cluster_leader import Ledger
from tests.cluster.test_cluster_leases import KEY, process
from tests.cluster_leader_support import LeaseCalls, until
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(60)]  # PostgreSQL whatever --storage says


def count_connections(watch: ConnectionWatch) -> list[int]:
    """From now on, how many times ``watch`` tried to connect (one count, in a list to read it live)."""
    tries = [0]
    pubsub = watch.redis.pubsub

    def counted(**kwargs: Any) -> PubSub:
        tries[0] += 1
        return pubsub(**kwargs)

    watch.redis.pubsub = counted  # type: ignore[method-assign]
    return tries


def retried(renewer: Renewer) -> Callable[[], bool]:
    """Whether ``renewer`` has sent a renewal since now."""
    since = renewer.renewals
    return lambda: renewer.renewals > since


@asynccontextmanager
async def watching(redis: Redis) -> AsyncIterator[ConnectionWatch]:
    watch = ConnectionWatch(redis, RELEASES)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.connected.wait(), 10)
        yield watch
    finally:
        task.cancel()
        await asyncio.wait({task})
        await watch.aclose()


async def test_a_broken_connection_is_told_before_redis_answers_again_and_watched_again(
    redis_server: RedisServer,
) -> None:
    told: list[str] = []

    def broken() -> None:
        raise RuntimeError("a holder's bug")

    async with open_redis(redis_server.url) as redis, watching(redis) as watch:
        watch.on_lost(broken)  # one holder's bug does not keep the others from hearing it
        watch.on_lost(lambda: told.append("lost"))
        tries = count_connections(watch)
        await asyncio.to_thread(redis_server.halt)
        await until(lambda: told == ["lost"], 5, "the break told")
        after_break = tries[0]
        # A third try begun: the second one after the break failed against nobody (told again, if
        # the watch told once per try instead of once per break).
        await until(lambda: tries[0] >= after_break + 2, 10, "a reconnection try failed")
        await asyncio.to_thread(redis_server.start)
        await asyncio.wait_for(watch.connected.wait(), 10)
        assert told == ["lost"] and watch.lost == 1  # once per break, not once per reconnection try


async def test_a_session_lease_is_not_trusted_from_the_break_until_redis_confirms_it(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    async with (
        process(postgresql_database, redis_server.url, "a", lease_ttl=30.0) as a,  # renews every 10 s
        watching(a.locks._redis) as watch,
        a.locks.hold(KEY) as lease,
    ):
        watch.on_lost(a.locks.suspect)
        assert lease.trusted()
        await asyncio.to_thread(redis_server.halt)
        await until(lambda: not lease.trusted(), 2, "the lease in doubt")  # not 30 s later
        await asyncio.to_thread(redis_server.start)  # empty: it forgot the lease
        await until(lease.trusted, 5, "the lease confirmed again")  # long before the next renewal
        assert await a.locks._redis.get(lease_key(KEY)) == "a"  # taken again: nobody else had it


async def test_a_leader_stops_its_duties_as_soon_as_the_connection_to_redis_breaks(
    redis_server: RedisServer,
) -> None:
    ttl = 10.0  # without the watch it would act for ttl/2 = 5 s more
    ledger = Ledger()
    async with open_redis(redis_server.url) as redis, watching(redis) as watch:
        leadership = Leadership(redis, "a", ttl)
        leadership.add_duty("ledger", ledger.duty("a"))
        watch.on_lost(leadership.suspect)
        async with leadership.campaigning():
            await until(leadership.holds, 5, "leading")
            await until(lambda: ledger.running() == ["a"], 5, "the duty running")
            await asyncio.to_thread(redis_server.halt)
            await until(lambda: not leadership.holds() and ledger.running() == [], 2, "stepped down")
            await asyncio.to_thread(redis_server.start)
            await until(lambda: ledger.running() == ["a"], ttl, "leading again once Redis is back")
        assert leadership.terms == 2


async def test_a_leader_that_resigns_hands_the_lease_to_a_waiting_process_at_once(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release is announced: the waiting process tries at once, not at its next try (a third of
    the TTL: here 100 s, far beyond the wait) nor when the lease would have expired."""
    ttl = 300.0
    ledger = Ledger()
    leases = LeaseCalls.record(monkeypatch)
    async with (
        open_redis(redis_server.url) as redis_a,
        open_redis(redis_server.url) as redis_b,
        watching(redis_b) as watch,
    ):
        a, b = Leadership(redis_a, "a", ttl), Leadership(redis_b, "b", ttl)
        a.add_duty("ledger", ledger.duty("a"))
        b.add_duty("ledger", ledger.duty("b"))
        watch.on_released(b.released)
        async with a.campaigning():
            await until(lambda: ledger.running() == ["a"], 10, "a leading")
            async with b.campaigning():
                await until(lambda: any(c.holder == "b" and c.returned >= 0 for c in leases.calls), 10,
                            "b tried in vain")  # fmt: skip  # it waits for its next try now
                await a.resign()
                await until(lambda: ledger.running() == ["b"], 20, "b leading")
        assert a.terms == 1 and b.terms == 1


async def test_a_lease_released_while_its_renewal_retries_against_a_redis_away_is_renewed_no_more(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    """The block ends while Redis is away and the renewal, in doubt, is under way (sent at the break,
    then every 0.2 s): the release ends the renewal (whatever becomes of its cancellation inside
    redis-py), so once Redis is back nothing takes the lease again and another process gets the
    session at once."""
    async with (
        process(postgresql_database, redis_server.url, "a", lease_ttl=30.0) as a,
        process(postgresql_database, redis_server.url, "b") as b,
        watching(a.locks._redis) as watch,
    ):
        watch.on_lost(a.locks.suspect)
        for _ in range(3):
            async with a.locks.hold(KEY):
                _, renewer = a.locks._held[KEY]
                renewed = retried(renewer)
                await asyncio.to_thread(redis_server.halt)
                await until(lambda: watch.lost > 0, 2, "the break noticed")
                await until(renewed, 5, "a renewal sent against nobody")  # redis-py retries it a while
            assert a.locks.held == 0
            # The renewals ended with the block (one that went on would take the lease again within
            # 0.2 s of Redis coming back, and keep it from b for ever).
            assert renewer.task.done()
            await asyncio.to_thread(redis_server.start)
            await asyncio.wait_for(watch.connected.wait(), 10)
            assert await a.locks._redis.get(lease_key(KEY)) is None
            async with b.locks.hold(KEY, max_wait=1.0):
                pass
            watch.lost = 0
