"""Session leases in Redis with fencing tokens (issue 15, items 1-2): one holder per session among the
processes of a cluster, a stalled holder stopped, and its late writes refused by the store.

Two lock instances (or two runtimes) on one Redis and one PostgreSQL stand for two processes; a holder
that "stalls" is one whose renewals come later than its lease lives (``renew_every`` > ``lease_ttl``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.base import ChatAddress, OutboundText
from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.fencing import FencedOut, issue_token, newest_token
from agent.db.urls import parse_storage_url
from agent.locks import LockTimeout
from agent.model.messages import Message
from gateway.cluster.leases.session_locks import RedisSessionLocks, lease_key
from gateway.cluster.redis import RedisUnavailable, open_redis
from gateway.home import HeraldHome
from gateway.ledger.outbox import Operation, Outbox, Outgoing
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.helpers import new_session
from tests.redis_server import RedisServer
from tests.virtual_time import virtual_time

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(60)]  # PostgreSQL whatever --storage says

KEY = "telegram:chat:42"


@dataclass
class Process:
    """What one gateway process would have: its database connections and its Redis connection."""

    storage: Storage
    locks: RedisSessionLocks


@asynccontextmanager
async def process(
    database_url: str,
    redis_url: str,
    owner: str,
    *,
    lease_ttl: float = 30.0,
    renew_every: float | None = None,
) -> AsyncIterator[Process]:
    async with AsyncExitStack() as stack:
        storage = await stack.enter_async_context(
            open_storage(parse_storage_url(database_url, Path("unused")))
        )
        redis = await stack.enter_async_context(open_redis(redis_url))
        locks = RedisSessionLocks(redis, storage, owner=owner, lease_ttl=lease_ttl, renew_every=renew_every)
        stack.push_async_callback(locks.aclose)
        yield Process(storage, locks)


async def test_two_processes_take_turns_on_a_session_and_tokens_only_grow(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    async with (
        process(postgresql_database, redis_server.url, "a") as a,
        process(postgresql_database, redis_server.url, "b") as b,
    ):
        told: list[str] = []
        async with a.locks.hold(KEY) as first:
            assert a.locks.held == 1
            with pytest.raises(LockTimeout, match="busy in another process"):
                async with b.locks.hold(KEY, max_wait=0.3, on_wait=told.append):
                    pass
            assert told == ["a"]
        assert a.locks.held == 0
        async with b.locks.hold(KEY, max_wait=1.0) as second:
            pass
        async with a.locks.hold(KEY, max_wait=1.0) as third:
            pass
        assert first.token is not None and second.token is not None and third.token is not None
        assert first.token < second.token < third.token
        assert await newest_token(a.storage, KEY) == third.token
        assert await redis_server_key_count(a, KEY) == 0  # released: nothing left in Redis

        inside = 0
        most = 0

        async def turn(locks: RedisSessionLocks) -> None:
            nonlocal inside, most
            async with locks.hold(KEY, max_wait=30):
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.02)
                inside -= 1

        await asyncio.gather(*(turn(locks) for _ in range(5) for locks in (a.locks, b.locks)))
        assert most == 1  # never two holders at once, in one process or across both
        assert await newest_token(a.storage, KEY) == third.token + 10


async def redis_server_key_count(proc: Process, key: str) -> int:
    return int(await proc.locks._redis.exists(lease_key(key)))


async def test_an_expired_lease_is_taken_over_and_the_stalled_holder_is_cancelled(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    async with (
        process(postgresql_database, redis_server.url, "stalled", lease_ttl=0.4, renew_every=0.8) as a,
        process(postgresql_database, redis_server.url, "new") as b,
    ):
        reached_the_end = False
        a_has_it = asyncio.Event()

        async def long_turn() -> None:
            nonlocal reached_the_end
            async with a.locks.hold(KEY):
                a_has_it.set()
                await asyncio.sleep(5.0)
                reached_the_end = True

        holder = asyncio.create_task(long_turn())
        await a_has_it.wait()
        async with b.locks.hold(KEY, max_wait=5.0) as lease:
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(holder, 5.0)  # its next renewal found the lease taken over
            assert not reached_the_end
            assert await b.locks._redis.get(lease_key(KEY)) == "new"  # the stopped holder left it alone
            assert a.locks.held == 0 and b.locks.held == 1
        assert lease.token == await newest_token(b.storage, KEY)


async def test_a_holder_that_lost_its_lease_cannot_write_and_the_new_holder_can(
    postgresql_database: str, redis_server: RedisServer, home: HeraldHome, emulator_url: str
) -> None:
    """A process paused past its lease wakes up: its messages and its reply are refused, nothing of
    them is stored, while the process that took the session over writes as usual."""
    config = make_config(
        emulator_url, storage={"url": postgresql_database}, cluster={"redis_url": redis_server.url}
    )
    async with open_agent_runtime(config, home) as runtime_a, open_agent_runtime(config, home) as runtime_b:
        assert runtime_a.cluster is not None and isinstance(runtime_b.locks, RedisSessionLocks)
        session = await new_session(runtime_a)
        key = session.session_key
        stalled = RedisSessionLocks(
            runtime_a.cluster.redis, runtime_a.storage, owner="a", lease_ttl=0.3, renew_every=60
        )
        reply = Outgoing(ChatAddress("telegram", "42"), Operation.SEND, OutboundText("an answer"))
        a_holds, b_done = asyncio.Event(), asyncio.Event()
        tokens: list[int | None] = []

        async def stalled_process() -> None:
            async with stalled.hold(key) as lease:
                tokens.append(lease.token)
                await runtime_a.store.messages.append(session.id, [Message(role="user", content="question")])
                a_holds.set()
                await b_done.wait()  # paused past the lease meanwhile
                with pytest.raises(FencedOut, match="taken over by a newer holder"):
                    await runtime_a.store.messages.append(
                        session.id, [Message(role="assistant", content="the stalled holder's answer")]
                    )
                with pytest.raises(FencedOut):
                    await Outbox(runtime_a.storage).enqueue([reply])

        async def new_process() -> None:
            await a_holds.wait()
            async with runtime_b.locks.hold(key, max_wait=5.0) as lease:
                tokens.append(lease.token)
                await runtime_b.store.messages.append(
                    session.id, [Message(role="assistant", content="the new holder's answer")]
                )
                await Outbox(runtime_b.storage).enqueue([reply])
            b_done.set()

        try:
            await asyncio.gather(stalled_process(), new_process())
        finally:
            await stalled.aclose()
        old, new = tokens
        assert old is not None and new is not None and new > old
        stored = await runtime_b.store.messages.load(session.id)
        assert [m.content for m in stored] == ["question", "the new holder's answer"]
        assert await Outbox(runtime_b.storage).pending_count() == 1  # the new holder's reply only


async def test_a_lease_redis_forgot_is_taken_again_unless_another_holder_had_the_session(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    """Redis restarted empty (or the lease expired while Redis could not be reached): the holder takes
    its lease again, unless the database shows a newer token (another process had the session): then
    it stops."""
    async with process(postgresql_database, redis_server.url, "a", lease_ttl=0.6) as a:
        redis = a.locks._redis
        a_has_it = asyncio.Event()
        forgotten = asyncio.Event()

        async def long_turn() -> None:
            async with a.locks.hold(KEY):
                a_has_it.set()
                await forgotten.wait()
                await asyncio.sleep(10)

        holder = asyncio.create_task(long_turn())
        await a_has_it.wait()
        await redis.delete(lease_key(KEY))
        async with asyncio.timeout(10):  # at its next renewal (every 0.2 s), however slow the machine
            while await redis.get(lease_key(KEY)) != "a":  # noqa: ASYNC110 - a state in Redis
                await asyncio.sleep(0.05)
        assert not holder.done()

        await redis.delete(lease_key(KEY))
        await issue_token(a.storage, KEY)  # another process held the session meanwhile
        forgotten.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(holder, 5.0)
        assert await redis.get(lease_key(KEY)) is None  # not kept by the holder that was stopped


async def test_waiting_for_a_lease_while_redis_is_down_is_redis_unavailable(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    async with process(postgresql_database, redis_server.url, "a") as a:
        redis_server.halt()
        with pytest.raises(RedisUnavailable, match=r"the cluster.s Redis .* cannot be reached"):
            async with a.locks.hold(KEY, max_wait=5.0):
                pass
        assert a.locks.held == 0 and a.locks.active_keys == 0
        redis_server.start()
        async with a.locks.hold(KEY, max_wait=5.0) as lease:
            assert lease.token == 1


async def test_a_lease_is_trusted_while_renewed_and_not_once_its_holder_was_paused_past_it(
    postgresql_database: str, redis_server: RedisServer
) -> None:
    """What a platform call asks before it is made (nothing fences it): a process stopped for longer
    than the lease (SIGSTOP: to the process, its clock jumped past the lease) must not trust it on
    waking. (How trust follows the renewals: ``tests/storage/test_renewal.py``.)"""
    async with process(postgresql_database, redis_server.url, "paused", lease_ttl=30.0) as a:
        async with a.locks.hold(KEY) as lease:
            assert lease.trusted()
            with virtual_time() as clock:
                clock.now += 30.0  # the whole process stood still past its lease
                assert not lease.trusted()
            assert lease.trusted()  # (the clock back where it was: this was the only difference)
        assert not lease.trusted()  # nor after the block
