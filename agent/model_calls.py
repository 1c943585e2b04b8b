"""Every model request of every purpose goes out through :meth:`ModelCalls.complete`, and only there.

A chat's turn and its tool rounds, a sub-agent, a background review, a compression's summary, a
scheduled job's run: each asks this one object, which

1. estimates the request's cost (``agent.spending.estimate``) and has the spend gate admit it
   (``agent.spending.gate``): a request over a limit raises ``OverBudget`` before anything is sent;
2. sends it with retries (``agent.providers.retry``), holding a slot of the request limiter per attempt;
3. records the provider's reported usage, priced from the model table with its cache prices, with its
   cost added to the spending windows of whoever pays, in one transaction (``agent.store``), and when it
   was sent (the provider writes and refreshes cache entries then: TTL pacing counts pauses from there);
   a request cancelled mid-stream records what it cost so far (``StreamProgress``), a failed one
   nothing; then settles the gate's reservation;
4. has an answered request's cache read judged (``agent.cache_misses``): a shortfall is a cache-miss
   event with its cause.

So a new kind of request cannot forget the limits, the usage record or the cache check: there is no other
way to a provider (``tests/test_spend_seam.py`` checks that nothing else calls one). A spoken reply's
synthesis (:meth:`ModelCalls.speak`) is billed per character and takes the same road: the gate admits its
price, the usage record (purpose "speech", its characters) and the settlement follow.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from agent.cache_misses.watch import CacheWatch, Exchange
from agent.cache_policy import FIVE_MINUTES, ONE_HOUR
from agent.limits import RequestLimiter
from agent.media.speech import Synthesizer
from agent.models import ModelInfo
from agent.providers.base import (
    Provider,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamProgress,
    TextCallback,
)
from agent.providers.retry import RetryCallback, RetryPolicy, call_with_retries, complete_with_retries
from agent.spending.estimate import estimate_cost
from agent.spending.gate import Admission, SpendGate
from agent.store import SessionRecord, SessionStore
from agent.usage import Usage, priced, spoken

REMEMBERED_SESSIONS = 4096  # sessions whose last request is remembered for estimates


@dataclass(frozen=True)
class _Sent:
    """A request on its way: for whom, through which client, why, and when it was sent."""

    session: SessionRecord
    provider: Provider
    request: ProviderRequest
    purpose: str
    at: float


class ModelCalls:
    """The one road to the providers: gate, retries, usage record."""

    def __init__(
        self,
        *,
        store: SessionStore,
        limiter: RequestLimiter,
        gate: SpendGate,
        model_info: Callable[[str], ModelInfo],
        cache_watch: CacheWatch | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.gate = gate
        self.model_info = model_info
        self.cache_watch = cache_watch  # judges every answered request's cache read
        self.clock = clock
        self._last_sent: OrderedDict[str, tuple[int, float]] = OrderedDict()  # session -> (tokens, when)

    async def complete(
        self,
        provider: Provider,
        request: ProviderRequest,
        *,
        session: SessionRecord,
        purpose: str,
        policy: RetryPolicy,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> ProviderResponse:
        """Send ``request`` on behalf of ``session`` (a side task's and a summary's: the parent's),
        recorded as ``purpose`` ("turn", "summary" ...).

        Raises ``OverBudget`` (nothing sent), a ``ProviderError`` after retries, or cancellation (what
        the stopped attempt cost is recorded first)."""
        info = self.model_info(provider.model)
        admission = await self.gate.admit(estimate_cost(request, info, cached_tokens=self._cached(request)))
        progress = StreamProgress()
        sent = _Sent(session, provider, request, purpose, self.clock())
        try:
            response = await complete_with_retries(
                provider,
                request,
                policy=policy,
                limiter=self.limiter,
                on_text=on_text,
                on_retry=on_retry,
                progress=progress,
            )
        except asyncio.CancelledError:  # a stopped answer was still paid for: count it
            await asyncio.shield(self._finish(sent, admission, progress.usage(request), answered=False))
            raise
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        await self._finish(sent, admission, response.usage, answered=True)
        return response

    async def speak(
        self,
        synthesizer: Synthesizer,
        text: str,
        *,
        session: SessionRecord,
        policy: RetryPolicy,
        timeout: float,  # noqa: ASYNC109 - one bound on every attempt and the waits between them
    ) -> bytes:
        """``text`` spoken by ``synthesizer`` on behalf of ``session`` (a spoken reply), as an audio file.

        Its price is known before it is sent (per character), so the gate admits exactly that; retries as
        ``policy`` says, all attempts within ``timeout`` seconds. Raises ``OverBudget`` (nothing sent) or a
        ``ProviderError``; a failed synthesis is not recorded (the services bill what they delivered)."""
        cost = synthesizer.cost(text)
        admission = await self.gate.admit(cost)
        sent_at = self.clock()
        try:
            async with asyncio.timeout(timeout):
                audio = await call_with_retries(lambda: synthesizer.synthesize(text), policy, name="speech")
        except TimeoutError:
            await asyncio.shield(self.gate.release(admission))
            raise ProviderError(f"no speech within {timeout:g} s", retryable=False, kind="timeout") from None
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        record = spoken(synthesizer.provider, synthesizer.model, len(text), cost)
        try:
            recorded = await self.store.record_request(
                session.id, record, at=self.clock(), sent_at=sent_at, spend=admission.keys
            )
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        await self.gate.settle(admission, cost, recorded.spent)
        return audio

    async def _finish(
        self, sent: _Sent, admission: Admission, usage: Usage | None, *, answered: bool
    ) -> None:
        """Record ``usage`` (None: nothing was sent) and settle the admission (the reservation is
        dropped whatever happens); an ``answered`` request's cache read is judged too."""
        if usage is None:
            await self.gate.release(admission)
            return
        provider, request = sent.provider, sent.request
        record = priced(sent.purpose, provider.name, provider.model, self.model_info(provider.model), usage)
        now = self.clock()
        try:
            recorded = await self.store.record_request(
                sent.session.id, record, at=now, sent_at=sent.at, spend=admission.keys
            )
        except BaseException:
            await self.gate.release(admission)
            raise
        self._remember(request.session_id, usage.prompt_tokens)
        await self.gate.settle(admission, record.cost, recorded.spent)
        if answered and self.cache_watch is not None:
            exchange = Exchange(sent.session, provider, request, record, recorded.request_id, sent.at, now)
            await self.cache_watch.observe(exchange)

    def _cached(self, request: ProviderRequest) -> int:
        """What of ``request`` the cache should still hold: its session's previous request, if that was
        sent within the TTL (as far as this process knows)."""
        size, sent_at = self._last_sent.get(request.session_id, (0, 0.0))
        ttl = ONE_HOUR if request.prefix_ttl == "1h" else FIVE_MINUTES
        return size if self.clock() - sent_at < ttl else 0

    def _remember(self, session_id: str, prompt_tokens: int) -> None:
        self._last_sent[session_id] = (prompt_tokens, self.clock())
        self._last_sent.move_to_end(session_id)
        while len(self._last_sent) > REMEMBERED_SESSIONS:
            self._last_sent.popitem(last=False)
