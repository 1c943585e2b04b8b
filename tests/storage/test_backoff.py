"""The one backoff (``resilience.backoff``): provider retries, the outbox sender, Telegram's polling, MCP
restarts, the database outage wait and the background loops all wait this way."""

from __future__ import annotations

import random

import pytest

from resilience.backoff import JITTER, Backoff, Streak


def test_the_wait_doubles_from_first_to_the_cap_with_one_jitter_range() -> None:
    backoff, rng = Backoff(first=1.0, cap=8.0), random.Random(1)
    low, high = 1 - JITTER, 1 + JITTER
    for failures, expected in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (10_000, 8.0)]:
        waits = [backoff.delay(failures, rng=rng) for _ in range(200)]
        assert all(expected * low <= w <= expected * high for w in waits), failures
        assert max(waits) - min(waits) > expected * JITTER  # spread: processes do not retry in lockstep


def test_a_positive_retry_after_wins_and_zero_falls_back_to_the_backoff() -> None:
    backoff, rng = Backoff(first=1.0, cap=8.0), random.Random(2)
    assert backoff.delay(3, retry_after=7.5, rng=rng) == 7.5
    assert backoff.delay(1, retry_after=600.0, rng=rng) == 600.0  # beyond the cap: the server knows
    assert 1 - JITTER <= backoff.delay(1, retry_after=0.0, rng=rng) <= 1 + JITTER  # never a hot loop


def test_a_streak_counts_failures_and_is_reset_on_success() -> None:
    streak = Streak(Backoff(first=1.0, cap=8.0), random.Random(3))
    waits = [streak.next_delay() for _ in range(6)]
    assert 1 - JITTER <= waits[0] <= 1 + JITTER and 8 * (1 - JITTER) <= waits[-1] <= 8 * (1 + JITTER)
    assert streak.reset() == 6 and streak.failures == 0
    assert 8 * (1 - JITTER) <= streak.next_delay(longest=True) <= 8 * (1 + JITTER)
    assert 2 * (1 - JITTER) <= streak.next_delay() <= 2 * (1 + JITTER)  # the streak's second failure
    assert streak.failures == 2


def test_a_backoff_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(ValueError, match="0 <= first <= cap"):
        Backoff(first=5.0, cap=1.0)
