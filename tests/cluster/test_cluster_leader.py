"""The leader lease on a real Redis: one leader at a time, a new one at once after a graceful stop,
stepping down when its lease is taken or a duty fails, and duties that never overlap between processes.

How the lease is kept (renewals, stepping down half a TTL after the last one when Redis is away or
slow, at once when the connection breaks) is the renewal policy, tested once in virtual time
(``tests/storage/test_renewal.py``); a leader cut off from Redis end to end:
``tests/cluster/test_cluster_connector.py``; a broken connection: ``tests/cluster/test_cluster_watch.py``."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import pytest

from gateway.cluster.leases.leader import LEADER_KEY, Leadership
from gateway.cluster.redis import connect as open_redis
from resilience.renewal import Loss
from tests.cluster_leader_support import LeaseCalls, cut_off, until
from tests.redis_server import RedisServer

TTL = 10.0  # a leader stalled by a loaded machine for less than 5 s stays leader
SLACK = 10.0  # generous bound on top of a TTL: a loaded CI machine


@dataclass
class Ledger:
    """When each process ran its duty: (who, started, stopped); never two at once."""

    spans: list[tuple[str, float, float | None]] = field(default_factory=list)

    def duty(self, who: str) -> Callable[[], AbstractAsyncContextManager[None]]:
        @asynccontextmanager
        async def run() -> AsyncIterator[None]:
            index = len(self.spans)
            self.spans.append((who, time.monotonic(), None))
            try:
                yield
            finally:
                self.spans[index] = (who, self.spans[index][1], time.monotonic())

        return run

    def running(self) -> list[str]:
        return [who for who, _, stopped in self.spans if stopped is None]

    def assert_never_overlapped(self) -> None:
        spans = sorted(
            (start, stop if stop is not None else float("inf"), who) for who, start, stop in self.spans
        )
        for (_, stop, who), (start, _, other) in itertools.pairwise(spans):
            assert start >= stop, f"{who} and {other} ran their duties at the same time"


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    yield redis_server.url


@asynccontextmanager
async def cluster(url: str, ledger: Ledger, names: list[str]) -> AsyncIterator[dict[str, Leadership]]:
    async with AsyncExitStack() as stack:
        members: dict[str, Leadership] = {}
        for name in names:
            redis = open_redis(url)
            stack.push_async_callback(redis.aclose)
            leadership = Leadership(redis, name, TTL)
            leadership.add_duty("ledger", ledger.duty(name))
            members[name] = await stack.enter_async_context(leadership.campaigning())
        yield members


async def test_one_leader_and_a_new_one_within_the_ttl(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger()
    leases = LeaseCalls.record(monkeypatch)
    async with AsyncExitStack() as stack:
        members: dict[str, Leadership] = {}
        stops: dict[str, Callable[[], Awaitable[None]]] = {}
        for name in ("a", "b", "c"):
            inner = AsyncExitStack()
            stops[name] = inner.aclose
            redis = open_redis(redis_url)
            inner.push_async_callback(redis.aclose)
            leadership = Leadership(redis, name, TTL)
            leadership.add_duty("ledger", ledger.duty(name))
            members[name] = await inner.enter_async_context(leadership.campaigning())
            stack.push_async_callback(inner.aclose)
        await until(lambda: len(ledger.running()) == 1, TTL + SLACK, "a leader")
        first = ledger.running()[0]
        renewer = members[first]._renewer
        assert renewer is not None
        await until(lambda: renewer.renewals >= 1, TTL, "a renewal")  # Redis extends this term's lease
        assert ledger.running() == [first] and renewer.trusted()
        assert sum(m.leading for m in members.values()) == 1
        await stops[first]()  # a graceful stop releases the lease
        await until(lambda: len(ledger.running()) == 1, TTL + SLACK, "a new leader")
        second = ledger.running()[0]
        assert second != first
        leases.assert_handed_over(LEADER_KEY, first, second)  # released, not expired: the next try wins
    ledger.assert_never_overlapped()


async def test_a_taken_lease_ends_the_term_at_the_next_renewal(redis_url: str) -> None:
    ledger = Ledger()
    async with cluster(redis_url, ledger, ["a"]) as members:
        await until(lambda: len(ledger.running()) == 1, TTL + SLACK, "a leader")
        intruder = open_redis(redis_url)
        try:
            renewer = members["a"]._renewer
            assert renewer is not None
            await intruder.set(LEADER_KEY, "someone-else/1", px=1000)
            await until(lambda: renewer.lost is not None, TTL + SLACK, "stepping down")
            assert renewer.lost is Loss.TAKEN  # found at the next renewal (not half a TTL later)
            await until(
                lambda: members["a"].terms == 2 and members["a"].leading,
                TTL + SLACK,
                "leading again once the intruder's lease expired",
            )
            assert ledger.spans[0][2] is not None  # the first term's duty stopped
        finally:
            await intruder.aclose()


async def test_a_duty_that_fails_to_start_ends_the_term(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("gateway.cluster.leases.leader.FAILED_DUTY_PAUSE", 30.0)
    caplog.set_level(logging.INFO, logger="gateway.cluster.leases.leader")
    ledger = Ledger()

    @asynccontextmanager
    async def broken() -> AsyncIterator[None]:
        raise RuntimeError("the platform refused")
        yield

    async with AsyncExitStack() as stack:
        redis = open_redis(redis_url)
        stack.push_async_callback(redis.aclose)
        failing = Leadership(redis, "failing", TTL)
        failing.add_duty("ledger", ledger.duty("failing"))
        failing.add_duty("broken", broken)
        await stack.enter_async_context(failing.campaigning())
        await until(lambda: "failing stepped down" in caplog.messages, TTL + SLACK, "a failed term's end")
        assert failing.terms == 1 and not failing.leading
        assert ledger.spans and ledger.running() == []  # what had started was stopped
        assert await redis.get(LEADER_KEY) is None  # and the lease released (not left to expire)
        healthy = Leadership(redis, "healthy", TTL)
        healthy.add_duty("ledger", ledger.duty("healthy"))
        await stack.enter_async_context(healthy.campaigning())
        await until(lambda: ledger.running() == ["healthy"], TTL + SLACK, "the other leads")
    ledger.assert_never_overlapped()


async def test_a_leader_woken_from_a_long_pause_holds_nothing_before_it_steps_down(redis_url: str) -> None:
    """What a pause (SIGSTOP, a long GC) looks like to the process: its clock jumped past the
    deadline. ``holds()`` says no at once, before the keeper has run: a duty asking it before each act
    (a poll) does nothing more."""
    ledger = Ledger()
    async with cluster(redis_url, ledger, ["a"]) as members:
        leader = members["a"]
        # Its duty running, not only the lease won: a loaded machine may start the duty later.
        await until(lambda: ledger.running() == ["a"] and leader.holds(), TTL + SLACK, "a leader at work")
        real = leader.clock
        leader.clock = lambda: real() + TTL  # woken after a pause of a whole TTL
        assert not leader.holds()
        await until(lambda: ledger.spans[0][2] is not None, TTL, "stepping down")  # (then it may win again)


async def test_a_leader_won_after_redis_was_away_waits_out_one_redis_forgot(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis came back empty (the lease forgotten) while the leader has not noticed: its watch is late
    and its commands hang (``cut_off``), so it leads on until half a TTL after its last renewal. A
    process that saw Redis away wins the empty Redis at its next try, but its duties start only once
    the one before has surely stepped down (``ttl`` after Redis was seen away): they never overlap."""
    ledger = Ledger()
    async with cluster(redis_url, ledger, ["a"]) as members:
        await until(lambda: ledger.running() == ["a"], TTL + SLACK, "a leading")
        redis = open_redis(redis_url)
        try:
            late = Leadership(redis, "b", TTL)
            late.add_duty("ledger", ledger.duty("b"))
            async with late.campaigning():
                cut_off(monkeypatch, "a")  # a neither renews nor notices, nor can it win again
                late.suspect()  # b's watch saw the connection break
                await redis.delete(LEADER_KEY)  # back empty: a's lease is forgotten
                await until(lambda: late.leading, TTL + SLACK, "b winning the empty Redis")
                await until(lambda: ledger.running() == ["b"], 2 * TTL + SLACK, "b's duties")
                assert not members["a"].leading
        finally:
            await redis.aclose()
    ledger.assert_never_overlapped()
