"""Retrying model calls: the one backoff (``resilience.backoff``), which honours ``retry-after``."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from agent.limits import RequestLimiter
from agent.model.provider import (
    Provider,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamProgress,
    TextCallback,
)
from resilience.backoff import Backoff

log = logging.getLogger(__name__)
T = TypeVar("T")

RetryCallback = Callable[[int, float, ProviderError], Awaitable[None]]

MAX_RETRY_AFTER = 120.0  # a longer wait is reported to the user instead of silently blocking the chat


@dataclass(frozen=True)
class RetryPolicy:
    """From ``model.max_retries`` / ``model.retry_base_delay``; ``max_delay`` caps the backoff."""

    max_retries: int
    base_delay: float
    max_delay: float = 30.0

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.base_delay, max(self.base_delay, self.max_delay))


def backoff_delay(attempt: int, policy: RetryPolicy, retry_after: float | None, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): a provider's positive ``retry-after``
    wins (it knows when capacity returns), else the jittered backoff, so that many sessions failing
    together do not retry in lockstep."""
    return policy.backoff.delay(attempt, retry_after=retry_after, rng=rng)


STATUS_REASONS = {
    429: "the model provider is rate-limiting requests",
    529: "the model provider is overloaded",
    408: "the model provider timed out",
}
KIND_REASONS = {  # ProviderError kinds, see agent/providers/errors.py
    "timeout": "the model provider did not answer in time",
    "unreachable": "the model provider could not be reached",
    "connection": "the connection to the model provider dropped",
    "malformed": "the model provider sent a malformed response",
    "overloaded": "the model provider is overloaded",
}
INTERNAL_ERROR = (
    "No answer: something went wrong on our side while calling the model provider (the details are "
    "in the log). Please try again."
)


def user_facing_error(error: ProviderError, attempts: int) -> str:
    """One clear sentence for the person waiting for an answer, naming the cause."""
    if error.kind == "internal":
        return INTERNAL_ERROR
    if error.kind == "configuration":  # e.g. no API key for the session's provider: say what to set
        return f"No answer: {error}"
    if error.status in STATUS_REASONS:
        reason = STATUS_REASONS[error.status]
    elif error.kind in KIND_REASONS:
        reason = KIND_REASONS[error.kind]
    elif error.status is not None and error.status >= 500:
        reason = f"the model provider had an internal error (HTTP {error.status})"
    else:
        return f"The model provider rejected the request: {error}"
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    return f"No answer: {reason} ({tries}). Please try again in a minute."


async def send_once(
    provider: Provider,
    request: ProviderRequest,
    *,
    limiter: RequestLimiter,
    on_text: TextCallback | None = None,
    progress: StreamProgress | None = None,
) -> ProviderResponse:
    """One attempt of a model call, holding a ``limiter`` slot (the backoff sleeps between attempts of
    :func:`call_with_retries` do not). ``progress`` follows it (see :class:`StreamProgress`)."""
    async with limiter.slot():
        return await provider.complete(request, on_text, progress)


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    name: str,
    on_retry: RetryCallback | None = None,
    rng: random.Random | None = None,
) -> T:
    """Await ``call()`` until it succeeds, raises a non-retryable :class:`ProviderError`, or retries run
    out (then the last error is raised, with ``attempts`` set). ``name`` is the service, for the log."""
    rng = rng or random.Random()
    attempt = 0
    while True:
        try:
            return await call()
        except ProviderError as error:
            attempt += 1
            error.attempts = attempt
            if not error.retryable or attempt > policy.max_retries:
                raise
            delay = backoff_delay(attempt, policy, error.retry_after, rng)
            if delay > MAX_RETRY_AFTER:
                raise
            # info, not warning: the user hears of it through on_retry, the log must not say it twice
            log.info(
                "%s failed (%s, status=%s: %s); retry %d/%d in %.1fs",
                name,
                error.kind,
                error.status,
                error,
                attempt,
                policy.max_retries,
                delay,
            )
            if on_retry is not None:
                await on_retry(attempt, delay, error)
            await asyncio.sleep(delay)
