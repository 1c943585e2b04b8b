"""Handing a batch to the sink again while it fails (``adapters.base.SinkRetry``): every adapter's one way
of waiting out a store that is away, on a fake clock (no real sleeping)."""

from __future__ import annotations

import logging

import pytest

from adapters.base import AdapterStatus, ChatType, InboundMessage, SinkRetry, SinkUnavailable
from resilience.backoff import Backoff

BACKOFF = Backoff(first=1.0, cap=8.0, jitter=0.0)  # no jitter: the waits are the formula's
LOG = logging.getLogger("adapters.test")
MESSAGE = InboundMessage(
    platform="test", chat_id="c", chat_type=ChatType.DIRECT, user_id="u", user_name="U",
    message_id="1", text="hello", timestamp=0.0,
)  # fmt: skip


class FlakySink:
    """Raises ``error`` for its first ``failures`` calls, then stores."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error = failures, error
        self.calls = 0
        self.stored: list[InboundMessage] = []

    async def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        self.stored.append(MESSAGE)


class FakeClock:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


async def test_a_store_that_is_away_is_waited_out_and_the_batch_stored_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOG.name)
    sink, clock = FlakySink(3, SinkUnavailable("the database is down")), FakeClock()
    retry = SinkRetry(BACKOFF, log=LOG, sleep=clock.sleep)
    assert await retry.until_stored(sink, "a test message")
    assert sink.stored == [MESSAGE] and sink.calls == 4
    assert clock.waits == [BACKOFF.delay(n) for n in (1, 2, 3)]  # growing: 1, 2, 4 seconds
    lines = [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert lines[0] == (
        logging.WARNING,
        "Storing a test message failed (the database is down); trying again",
        False,
    )
    assert [level for level, _, _ in lines[1:3]] == [logging.DEBUG, logging.DEBUG]  # once per streak
    assert lines[-1] == (logging.INFO, "Stored a test message after 3 failed attempt(s)", False)
    assert retry.streak.failures == 0


async def test_another_failure_is_tried_a_few_times_then_the_batch_is_lost_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink, clock = FlakySink(5, RuntimeError("a bug")), FakeClock()
    retry = SinkRetry(BACKOFF, log=LOG, sleep=clock.sleep)
    assert not await retry.until_stored(sink, "a test message", tries=2)
    assert sink.stored == [] and sink.calls == 2 and clock.waits == [BACKOFF.delay(1)]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "Storing a test message failed (a bug); trying again",
        "Storing a test message failed 2 times; it is lost",
    ]
    assert all(r.exc_info for r in errors)  # a bug shows its traceback


async def test_waiting_ends_when_the_adapter_stops_receiving() -> None:
    sink, clock = FlakySink(100, SinkUnavailable("down")), FakeClock()
    going = iter([True, True, False])
    retry = SinkRetry(BACKOFF, log=LOG, sleep=clock.sleep)
    assert not await retry.until_stored(sink, "a test message", going_on=lambda: next(going))
    assert sink.calls == 2 and sink.stored == []


async def test_one_attempt_waits_after_a_failure_and_says_so_in_the_status() -> None:
    sink, clock, status = FlakySink(2, SinkUnavailable("down")), FakeClock(), AdapterStatus()
    retry = SinkRetry(BACKOFF, log=LOG, sleep=clock.sleep, status=status)
    assert not await retry.attempt(sink, "test updates 5-7")
    assert status.detail == "test updates 5-7 not stored yet: down"
    assert not await retry.attempt(sink, "test updates 5-7", pause=False)  # the caller pauses
    assert clock.waits == [BACKOFF.delay(1)]
    await retry.pause()
    assert await retry.attempt(sink, "test updates 5-7")
    assert sink.stored == [MESSAGE] and clock.waits == [BACKOFF.delay(1), BACKOFF.delay(2)]
    assert retry.streak.failures == 0
