"""Backoff honours retry-after, jitters otherwise, and failures read as one clear sentence."""

from __future__ import annotations

import random

from agent.providers.base import ProviderError
from agent.providers.retry import RetryPolicy, backoff_delay, user_facing_error


def test_retry_after_wins_over_backoff() -> None:
    assert backoff_delay(3, RetryPolicy(base_delay=1.0), 7.5, random.Random(0)) == 7.5


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0)
    rng = random.Random(1)
    first = [backoff_delay(1, policy, None, rng) for _ in range(50)]
    third = [backoff_delay(3, policy, None, rng) for _ in range(50)]
    assert all(0.75 <= d <= 1.25 for d in first) and len(set(first)) > 1
    assert all(3.0 <= d <= 5.0 for d in third)
    assert all(d <= 12.5 for d in (backoff_delay(10, policy, None, rng) for _ in range(20)))


def test_user_facing_errors_are_one_sentence() -> None:
    overloaded = ProviderError("Overloaded", retryable=True, status=529)
    assert user_facing_error(overloaded, 4) == (
        "No answer: the model provider is overloaded (4 attempts). Please try again in a minute."
    )
    bad = ProviderError("prompt is too long: 300000 tokens > 200000 maximum", retryable=False, status=400)
    assert "prompt is too long" in user_facing_error(bad, 1)
