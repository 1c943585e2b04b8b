"""Every model request of every purpose goes out through :meth:`ModelCalls.complete`, and only there.

A chat's turn and its tool rounds, a sub-agent, a background review, a compression's summary, a
scheduled job's run: each asks this one object, which

1. estimates the request's cost (``agent.spending.estimate``) and has the spend gate admit it
   (``agent.spending.gate``): a request over a limit raises ``OverBudget`` before anything is sent;
2. sends it with retries (``agent.providers.retry``), holding a slot of the request limiter per attempt;
3. records the provider's reported usage, priced from the model table with its cache prices, with its
   cost added to the spending windows of whoever pays, in one transaction (``agent.store``); a request
   cancelled mid-stream records what it cost so far (``StreamProgress``), a failed one nothing; then
   settles the gate's reservation.

So a new kind of request cannot forget the limits or the usage record: there is no other way to a
provider (``tests/test_spend_seam.py`` checks that nothing else calls one).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from agent.cache_policy import FIVE_MINUTES, ONE_HOUR
from agent.limits import RequestLimiter
from agent.models import ModelInfo
from agent.providers.base import Provider, ProviderRequest, ProviderResponse, StreamProgress, TextCallback
from agent.providers.retry import RetryCallback, RetryPolicy, complete_with_retries
from agent.spending.estimate import estimate_cost
from agent.spending.gate import Admission, SpendGate
from agent.store import SessionStore
from agent.usage import Usage, priced

REMEMBERED_SESSIONS = 4096  # sessions whose last request is remembered for estimates


class ModelCalls:
    """The one road to the providers: gate, retries, usage record."""

    def __init__(
        self,
        *,
        store: SessionStore,
        limiter: RequestLimiter,
        gate: SpendGate,
        model_info: Callable[[str], ModelInfo],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.gate = gate
        self.model_info = model_info
        self.clock = clock
        self._last_sent: OrderedDict[str, tuple[int, float]] = OrderedDict()  # session -> (tokens, when)

    async def complete(
        self,
        provider: Provider,
        request: ProviderRequest,
        *,
        purpose: str,
        policy: RetryPolicy,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> ProviderResponse:
        """Send ``request`` on behalf of its session, recorded as ``purpose`` ("turn", "summary" ...).

        Raises ``OverBudget`` (nothing sent), a ``ProviderError`` after retries, or cancellation (what
        the stopped attempt cost is recorded first)."""
        info = self.model_info(provider.model)
        admission = await self.gate.admit(estimate_cost(request, info, cached_tokens=self._cached(request)))
        progress = StreamProgress()
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
            await asyncio.shield(self._finish(provider, request, purpose, admission, progress.usage(request)))
            raise
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        await self._finish(provider, request, purpose, admission, response.usage)
        return response

    async def _finish(
        self,
        provider: Provider,
        request: ProviderRequest,
        purpose: str,
        admission: Admission,
        usage: Usage | None,
    ) -> None:
        """Record ``usage`` (None: nothing was sent) and settle the admission; the reservation is
        dropped whatever happens."""
        if usage is None:
            await self.gate.release(admission)
            return
        record = priced(purpose, provider.name, provider.model, self.model_info(provider.model), usage)
        try:
            totals = await self.store.record_request(
                request.session_id, record, at=self.clock(), spend=admission.keys
            )
        except BaseException:
            await self.gate.release(admission)
            raise
        self._remember(request.session_id, usage.prompt_tokens)
        await self.gate.settle(admission, record.cost, totals)

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
