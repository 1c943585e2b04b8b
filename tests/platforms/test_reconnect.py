"""Trying a platform link again while it fails (``adapters.reconnect.Reconnect``): the one way Email's
IMAP reader, Matrix's sync, Signal's event stream and Telegram's polling wait, log and report a link
that is down, on a fake clock (no real sleeping)."""

from __future__ import annotations

import logging

import pytest

from adapters.base import AdapterStatus
from adapters.reconnect import Reconnect
from resilience.backoff import Backoff

BACKOFF = Backoff(first=1.0, cap=8.0, jitter=0.0)  # no jitter: the waits are the formula's
LOG = logging.getLogger("adapters.test")


class FakeClock:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


def link(status: AdapterStatus, clock: FakeClock) -> Reconnect:
    return Reconnect(BACKOFF, "Test stream", log=LOG, status=status, sleep=clock.sleep)


async def test_a_streak_is_logged_once_shown_while_it_lasts_and_its_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOG.name)
    status, clock = AdapterStatus(connected=True), FakeClock()
    stream = link(status, clock)
    for problem in ("refused", "refused", "timed out"):
        await stream.failed(problem)
        assert not status.connected and status.detail == f"Test stream failed: {problem}"
    assert clock.waits == [1.0, 2.0, 4.0]  # growing while it keeps failing
    stream.recovered()
    stream.recovered()  # a link that keeps working says nothing more
    assert status.connected and status.detail == ""
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "Test stream failed (refused); trying again with a backoff"),
        (logging.DEBUG, "Test stream failed again: refused"),
        (logging.DEBUG, "Test stream failed again: timed out"),
        (logging.INFO, "Test stream recovered after 3 failed attempt(s)"),
    ]
    await stream.failed("refused")  # a new streak starts from the first pause, logged again
    assert clock.waits[-1] == 1.0 and caplog.records[-1].levelno == logging.WARNING


async def test_a_servers_wait_and_a_lasting_failure_set_the_pause_and_another_kind_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    status, clock = AdapterStatus(), FakeClock()
    stream = link(status, clock)
    await stream.failed("429", retry_after=17.0)
    await stream.failed("conflict", longest=True, level=logging.ERROR, advice="stop the other one")
    await stream.failed("conflict", longest=True, level=logging.ERROR, advice="stop the other one")
    assert clock.waits == [17.0, 8.0, 8.0]
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == [
        (logging.WARNING, "Test stream failed (429); trying again with a backoff"),
        (logging.ERROR, "Test stream failed (conflict): stop the other one; trying again"),
    ]
