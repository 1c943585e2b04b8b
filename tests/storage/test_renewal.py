"""The one lease-renewal policy (``resilience.renewal``), in virtual time against a scripted lease: when
it renews, how long a lease is trusted, when a holder that fences itself gives its lease up, what a
broken connection does, and what an operator reads. Every lease of Herald (leader, shards, sessions,
claims, slots) keeps its lease this way; their real-Redis and database tests check only their own
policy on top."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from resilience.renewal import DOUBT_RETRY, Loss, Policy, Renewal, Renewer
from resilience.unreachable import Unreachable
from tests.virtual_time import VirtualClock, virtual_time

TTL = 30.0


class StoreAway(Unreachable):
    pass


@dataclass
class ScriptedLease:
    """A lease whose store answers what the test says: an outcome, an error, or nothing (a hang)."""

    clock: VirtualClock
    answer: Renewal | Exception | None = Renewal.HELD  # None: the call hangs until cancelled
    calls: list[float] = field(default_factory=list)  # when each renewal was sent
    latency: float = 0.0  # seconds each answer takes

    async def renew(self) -> Renewal:
        self.calls.append(self.clock.now)
        if self.latency:
            await asyncio.sleep(self.latency)
        answer = self.answer
        if answer is None:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass
class Holder:
    """A renewer under test, what it lost, and the lease it keeps."""

    renewer: Renewer
    lease: ScriptedLease
    clock: VirtualClock
    losses: list[tuple[Loss, float]]

    async def until(self, condition: Callable[[], bool], seconds: float) -> None:
        """Let ``seconds`` of virtual time pass at most, until ``condition``."""
        async with asyncio.timeout(seconds):
            while not condition():  # noqa: ASYNC110 - polled in virtual time: costs nothing
                await asyncio.sleep(0.01)

    async def after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@asynccontextmanager
async def holding(policy: Policy) -> AsyncIterator[Holder]:
    with virtual_time() as clock:
        lease = ScriptedLease(clock)
        losses: list[tuple[Loss, float]] = []
        renewer = Renewer(
            lease, policy, name="the test lease", on_lost=lambda loss: losses.append((loss, clock.now))
        )
        start = clock.now
        assert renewer.confirm(renewer.attempt())  # taken now
        renewer.start()
        try:
            yield Holder(renewer, lease, clock, losses)
        finally:
            await renewer.stop()
        assert start <= clock.now


FENCED = Policy(TTL, trust=TTL / 2, fence=True, distrust_on_break=True)  # the leader's
CHECKED = Policy(TTL, trust=TTL, distrust_on_break=True)  # a session's: trusted, fenced by the database
RECHECKED = Policy(TTL, trust=TTL / 2, fence=True)  # a Discord shard's: a break only re-checks it


async def test_a_held_lease_is_renewed_every_third_of_its_ttl_and_trusted_throughout() -> None:
    async with holding(FENCED) as h:
        start = h.clock.now
        for _ in range(10):
            await h.after(TTL / 6)
            assert h.renewer.trusted()
        offsets = [round(at - start, 6) for at in h.lease.calls]
        assert offsets == [10.0, 20.0, 30.0, 40.0, 50.0]
        assert h.losses == []


async def test_trust_counts_from_when_the_renewal_was_sent_not_when_it_was_answered() -> None:
    async with holding(CHECKED) as h:
        h.lease.latency = 4.0  # a slow store: the lease may lapse 4 s before the answer says so
        start = h.clock.now
        await h.until(lambda: h.renewer.renewals == 1, TTL)
        await h.after(4.0 + 0.01)
        assert h.renewer.deadline == pytest.approx(start + 10.0 + TTL)
        await h.until(lambda: h.renewer.renewals == 2, TTL)
        assert h.lease.calls[1] == pytest.approx(start + 20.0)  # a third of the TTL after the last was sent


async def test_a_holder_that_fences_itself_gives_the_lease_up_when_its_store_stops_answering(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with holding(FENCED) as h:
        start = h.clock.now
        await h.after(TTL / 3 + 0.01)  # one renewal confirmed at +10
        h.lease.answer = None  # the next ones hang (a partition): each is cut at the deadline
        await h.until(lambda: bool(h.losses), TTL)
        [(loss, at)] = h.losses
        assert loss is Loss.LAPSED
        assert at == pytest.approx(start + 10.0 + TTL / 2)  # half a TTL after the last renewal was sent
        assert not h.renewer.trusted()
        calls = len(h.lease.calls)
        await h.after(TTL)
        assert len(h.lease.calls) == calls  # nothing renewed after it was given up
    warnings = [r for r in caplog.records if "cannot renew the test lease" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


async def test_failures_are_retried_often_one_warning_and_one_line_on_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="resilience")
    async with holding(CHECKED) as h:
        start = h.clock.now
        h.lease.answer = StoreAway("the store is down")
        await h.after(TTL / 3 + 3 * TTL / 10 + 0.01)  # the renewal at +10 and three retries, a tenth apart
        assert [round(at - start, 6) for at in h.lease.calls] == [10.0, 13.0, 16.0, 19.0]
        assert h.renewer.trusted()  # still within a TTL of the take
        h.lease.answer = Renewal.HELD
        await h.after(3.0)
        assert h.renewer.trusted() and h.renewer.deadline == pytest.approx(start + 22.0 + TTL)
        assert h.losses == []
    lines = [r for r in caplog.records if r.name == "resilience.renewal" and r.levelno >= logging.INFO]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.WARNING, "cannot renew the test lease (the store is down); trying again"),
        (logging.INFO, "The test lease is renewed again (after 4 failed attempt(s))"),
    ]


async def test_an_error_nobody_foresaw_is_logged_with_its_traceback_and_the_lease_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with holding(CHECKED) as h:
        h.lease.answer = RuntimeError("a bug in the store's client")
        await h.after(TTL / 3 + 0.01)
        h.lease.answer = Renewal.HELD
        await h.after(TTL / 10)
        assert h.renewer.trusted() and h.losses == []
    [record] = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert record.levelno == logging.ERROR and record.exc_info is not None


async def test_a_lease_found_taken_is_given_up_at_once_and_renewed_no_more() -> None:
    async with holding(CHECKED) as h:
        start = h.clock.now
        h.lease.answer = Renewal.LOST
        await h.until(lambda: bool(h.losses), TTL)
        [(loss, at)] = h.losses
        assert loss is Loss.TAKEN and at == pytest.approx(start + 10.0)
        assert not h.renewer.trusted() and h.renewer.task.done()
        await h.after(TTL)
        assert len(h.lease.calls) == 1


async def test_a_lease_taken_again_after_it_lapsed_is_trusted_again_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with holding(CHECKED) as h:
        h.lease.answer = Renewal.RETAKEN
        await h.after(TTL / 3 + 0.01)
        assert h.renewer.trusted() and h.losses == []
    assert "The test lease had lapsed (or its store forgot it); taken again" in caplog.messages


async def test_a_broken_connection_ends_the_trust_until_a_renewal_made_at_once_confirms_it() -> None:
    async with holding(CHECKED) as h:
        await h.after(1.0)
        h.lease.answer = StoreAway("Redis restarting")
        broke = h.clock.now
        h.renewer.suspect()
        assert not h.renewer.trusted()  # at once: nothing is acted on under a lease Redis may have forgotten
        await h.after(0.9)
        offsets = [round(at - broke, 6) for at in h.lease.calls]
        assert offsets == [round(i * DOUBT_RETRY, 6) for i in range(len(offsets))] and len(offsets) == 5
        h.lease.answer = Renewal.RETAKEN  # it forgot the lease; nobody else had taken it
        await h.after(DOUBT_RETRY)
        assert h.renewer.trusted() and h.losses == []
        calls = len(h.lease.calls)
        await h.after(TTL / 3 - 1.0)
        assert len(h.lease.calls) == calls  # back to every third of the TTL


async def test_a_broken_connection_makes_a_holder_that_fences_itself_give_up_at_once() -> None:
    async with holding(FENCED) as h:
        await h.after(1.0)
        h.renewer.suspect()
        [(loss, at)] = h.losses
        assert loss is Loss.BROKEN and at == pytest.approx(h.clock.now)
        assert not h.renewer.trusted()


async def test_a_broken_connection_only_rechecks_a_lease_whose_holder_does_not_distrust_it() -> None:
    async with holding(RECHECKED) as h:
        await h.after(1.0)
        h.lease.answer = Renewal.LOST  # Redis came back empty and another took it meanwhile
        broke = h.clock.now
        h.renewer.suspect()
        assert h.renewer.trusted()  # until the store says otherwise
        await h.until(lambda: bool(h.losses), 0.1)
        assert [loss for loss, _ in h.losses] == [Loss.TAKEN] and h.losses[0][1] == pytest.approx(broke)


async def test_an_answer_to_a_renewal_sent_before_a_break_confirms_nothing() -> None:
    async with holding(CHECKED) as h:
        h.lease.latency = 1.0
        await h.after(TTL / 3 + 0.5)  # a renewal is on its way
        h.renewer.suspect()
        await h.after(0.5 + 0.01)  # its answer (HELD) arrives: from before the break
        assert not h.renewer.trusted()
        await h.after(1.0)  # the renewal made at once answers
        assert h.renewer.trusted()


async def test_stopping_is_idempotent_and_a_late_answer_changes_nothing() -> None:
    async with holding(CHECKED) as h:
        h.lease.answer = Renewal.LOST
        h.lease.latency = 5.0
        await h.after(TTL / 3 + 1.0)  # a renewal is on its way, and will say "lost"
        await h.renewer.stop()
        await h.renewer.stop()
        await h.after(10.0)
        assert h.losses == [] and not h.renewer.trusted() and h.renewer.task.done()


def test_a_policy_without_a_trusted_span_cannot_fence() -> None:
    with pytest.raises(ValueError, match="fences itself needs a trusted span"):
        Policy(TTL, fence=True)
