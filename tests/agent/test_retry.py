"""Backoff honours retry-after, jitters otherwise, and failures read as one clear sentence."""

from __future__ import annotations

import random

import pytest

from agent.limits import LocalRequestLimiter
from agent.model.provider import ProviderError
from agent.providers.retry import INTERNAL_ERROR, RetryPolicy, backoff_delay, user_facing_error


def test_retry_after_wins_over_backoff() -> None:
    assert backoff_delay(3, RetryPolicy(max_retries=3, base_delay=1.0), 7.5, random.Random(0)) == 7.5


def test_the_backoff_follows_model_settings() -> None:
    """``model.retry_base_delay`` is the first wait of the one backoff (``tests/storage/test_backoff.py``)."""
    policy = RetryPolicy(max_retries=3, base_delay=1.0, max_delay=10.0)
    rng = random.Random(1)
    first = [backoff_delay(1, policy, None, rng) for _ in range(50)]
    third = [backoff_delay(3, policy, None, rng) for _ in range(50)]
    assert all(0.75 <= d <= 1.25 for d in first) and len(set(first)) > 1
    assert all(3.0 <= d <= 5.0 for d in third)
    assert all(d <= 12.5 for d in (backoff_delay(10, policy, None, rng) for _ in range(20)))
    assert backoff_delay(1, RetryPolicy(max_retries=3, base_delay=0), None, rng) == 0  # no wait at all


def test_user_facing_errors_are_one_sentence() -> None:
    overloaded = ProviderError("Overloaded", retryable=True, status=529)
    assert user_facing_error(overloaded, 4) == (
        "No answer: the model provider is overloaded (4 attempts). Please try again in a minute."
    )
    bad = ProviderError("prompt is too long: 300000 tokens > 200000 maximum", retryable=False, status=400)
    assert "prompt is too long" in user_facing_error(bad, 1)
    causes = {
        "timeout": "the model provider did not answer in time",
        "unreachable": "the model provider could not be reached",
        "connection": "the connection to the model provider dropped",
        "malformed": "the model provider sent a malformed response",
    }
    for kind, cause in causes.items():
        sentence = user_facing_error(ProviderError("detail for the log", retryable=True, kind=kind), 2)
        assert sentence == f"No answer: {cause} (2 attempts). Please try again in a minute."
    internal = ProviderError("unexpected KeyError: 'usage'", retryable=False, kind="internal")
    assert user_facing_error(internal, 1) == INTERNAL_ERROR and "KeyError" not in INTERNAL_ERROR


async def test_the_error_reports_how_many_calls_were_made() -> None:
    from agent.model.provider import Provider, ProviderRequest
    from agent.providers.retry import call_with_retries, send_once

    class Flaky(Provider):
        api, name, model = "anthropic", "flaky", "m"

        def __init__(self, errors: list[ProviderError]) -> None:
            self.errors = errors

        async def complete(self, request, on_text=None, progress=None):
            raise self.errors.pop(0)

        def wire_message(self, message):
            return {}

        def build_body(self, request, *, with_files=True):
            return {}

    request = ProviderRequest("s", None, (), (), 10)  # type: ignore[arg-type]
    policy = RetryPolicy(max_retries=3, base_delay=0)
    overloaded = [ProviderError("busy", retryable=True, status=529) for _ in range(2)]
    rejected = ProviderError("bad", retryable=False, status=400)
    with pytest.raises(ProviderError) as info:
        flaky, limiter = Flaky([*overloaded, rejected]), LocalRequestLimiter(1)
        await call_with_retries(lambda: send_once(flaky, request, limiter=limiter), policy, name="flaky")
    assert info.value is rejected and info.value.attempts == 3
    long_wait = ProviderError("later", retryable=True, status=429, retry_after=3600)
    with pytest.raises(ProviderError) as info:
        flaky, limiter = Flaky([long_wait]), LocalRequestLimiter(1)
        await call_with_retries(lambda: send_once(flaky, request, limiter=limiter), policy, name="flaky")
    assert info.value.attempts == 1 and "(1 attempt)" in user_facing_error(info.value, info.value.attempts)
