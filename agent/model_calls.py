"""Every model request of every purpose goes out through :meth:`ModelCalls.complete`, and only there.

A chat's turn and its tool rounds, a sub-agent, a background review, a compression's summary, a
scheduled job's run: each asks this one object, which

1. prices what the request can cost (``agent.spending.estimate``: its input and a whole ``max_tokens``
   answer) and has the spend gate reserve it (``agent.spending.gate``), lowering ``max_tokens`` to what
   the limits can still pay: a request that cannot be paid even a short answer raises ``OverBudget``
   before anything is sent;
2. sends it with retries (``agent.providers.retry``), holding a slot of the request limiter per attempt;
   every attempt is admitted (step 1) and recorded (step 3) on its own;
3. records the provider's reported usage, priced from the model table with its cache prices, with its
   cost added to the spending windows of whoever pays, in one transaction (``agent.store``), and when it
   was sent (the provider writes and refreshes cache entries then: TTL pacing counts pauses from there);
   an attempt cancelled or broken mid-stream records what it was billed so far (``StreamProgress``),
   one that failed before the provider answered nothing; then settles the gate's reservation;
4. has an answered request's cache read judged (``agent.cache_misses``): a shortfall is a cache-miss
   event with its cause;
5. when the session's own model still fails after its retries (overloaded, 5xx, timeouts, dropped
   connections: ``agent.failover``), sends the same request to the fallback models in turn, each through
   steps 1 to 4 at its own prices and under its own name, and probes the failing model in the background
   until it answers again. A background review waits for the session's own model instead.

A request that can wait (``agent.batching``: a job marked ``batch``, a review with ``agent.review_batch``)
is first sent through the provider's batch API: the same body, admitted at half price with a reservation
that lasts until its deadline, recorded as a batch request (half price) when its answer comes; when the
batch is given up (deadline, failure, no batch API), the request takes the normal road above, once.

So a new kind of request cannot forget the limits, the usage record or the cache check: there is no other
way to a provider (``tests/money/test_spend_seam.py`` checks that nothing else calls one). Paid services that
are not models (``agent.paid``: a spoken reply's synthesis, a transcription, a web search) take the same
road through :meth:`ModelCalls.pay`: the gate admits their price, the usage record (of their purpose) and
the settlement follow.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from agent.batching.mode import Batching, current_batching
from agent.batching.road import BatchRoad, request_digest
from agent.cache_policy import FIVE_MINUTES, ONE_HOUR
from agent.cache_watch import CacheWatch, Exchange
from agent.failover import PROBE, WAITS_FOR_PRIMARY, Failover, Outage, fails_over, failure_reason
from agent.limits import RequestLimiter
from agent.media.speech import Synthesizer
from agent.model.messages import Message
from agent.model.provider import (
    FailedOver,
    Provider,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
    StreamProgress,
    TextCallback,
)
from agent.models import ModelInfo
from agent.paid import ServiceCall
from agent.prompt import SystemPrompt
from agent.providers.retry import RetryCallback, RetryPolicy, call_with_retries, send_once
from agent.spending.estimate import request_price
from agent.spending.gate import Admission, OverBudget, SpendGate
from agent.store import SessionRecord, SessionStore
from agent.usage import SPEECH_PURPOSE, Usage, priced, service_usage

log = logging.getLogger(__name__)

T = TypeVar("T")

REMEMBERED_SESSIONS = 4096  # sessions whose last request is remembered for estimates
PROBE_POLICY = RetryPolicy(max_retries=0, base_delay=0.0)  # one attempt: the next probe is an interval away
PROBE_SYSTEM = SystemPrompt(stable="Reply with one word.", context="", volatile="")
BATCH_HOLD_MARGIN = 300.0  # seconds a batch request's reservation outlives its deadline (its last poll)

FailoverCallback = Callable[[FailedOver], Awaitable[None]]
"""Told before a fallback is asked, so text the failed model streamed can be discarded."""


def probe_request(session_id: str) -> ProviderRequest:
    """A probe: a few tokens in, one out (``max_tokens`` 1). Its prefix is far below any cacheable
    minimum: it neither writes nor reads a cache entry."""
    return ProviderRequest(
        session_id=session_id,
        system=PROBE_SYSTEM,
        tools=(),
        messages=(Message(role="user", content="ping"),),
        max_tokens=1,
    )


def _billed(progress: StreamProgress, request: ProviderRequest) -> Usage | None:
    """What a failed attempt was billed: nothing unless the provider had started its answer (reported
    its usage, or streamed some of it); then what it reported, with the output streamed so far."""
    if progress.reported is None and progress.output_chars == 0:
        return None
    return progress.usage(request)


def _again(error: ProviderError) -> ProviderError:
    """A fresh copy of ``error`` to raise (an outage's error is raised for many requests, in many tasks)."""
    copy = ProviderError(
        str(error),
        retryable=error.retryable,
        status=error.status,
        retry_after=error.retry_after,
        kind=error.kind,
    )
    copy.attempts = error.attempts
    return copy


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
        failover: Failover | None = None,
        batches: BatchRoad | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.batches = batches  # the batch API's road (None: every request is sent normally)
        self.limiter = limiter
        self.gate = gate
        self.model_info = model_info
        self.cache_watch = cache_watch  # judges every answered request's cache read
        self.failover = failover  # the fallback models (None: none configured)
        self.clock = clock
        # (session, model) -> (prompt tokens, when) of its last request
        self._last_sent: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
        self._probes: set[asyncio.Task[None]] = set()

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
        on_failover: FailoverCallback | None = None,
    ) -> ProviderResponse:
        """Send ``request`` on behalf of ``session`` (a side task's and a summary's: the parent's),
        recorded as ``purpose`` ("turn", "summary" ...).

        When ``provider`` (the session's own model) fails for good with a failure another model may not
        share, the fallbacks are asked in turn (``on_failover`` before each); the answer then names the
        fallback in ``failed_over``.

        Raises ``OverBudget`` (nothing sent), a ``ProviderError`` after retries (the session's own
        model's, when the fallbacks failed too), or cancellation (what the stopped attempt cost is
        recorded first)."""
        mode = current_batching(purpose)
        if mode is not None and self.batches is not None:
            answered = await self._batched(provider, request, session, purpose, mode)
            if answered is not None:
                return answered
        fallbacks = self._fallbacks(provider, purpose)
        if self.failover is None or not fallbacks:
            response = await self._send(provider, request, session, purpose, policy, on_text, on_retry)
            if self.failover is not None and self.failover.outage(provider) is not None:
                self.failover.probed(provider, None, self.clock())  # it answered (a review): it is back
            return response
        outage = self.failover.outage(provider)
        if outage is None:
            try:
                return await self._send(provider, request, session, purpose, policy, on_text, on_retry)
            except ProviderError as error:
                if not fails_over(error):
                    raise
                outage = self.failover.failed(provider, error, self.clock())
        elif self.failover.probe_due(provider, self.clock()):
            self._start_probe(provider, session)
        return await self._fall_back(
            provider, outage, fallbacks, request, session, purpose, policy, on_text, on_retry, on_failover
        )

    def _fallbacks(self, provider: Provider, purpose: str) -> list[Provider]:
        if self.failover is None or purpose in WAITS_FOR_PRIMARY:
            return []
        return self.failover.fallbacks(provider)

    async def _fall_back(
        self,
        primary: Provider,
        outage: Outage,
        fallbacks: Sequence[Provider],
        request: ProviderRequest,
        session: SessionRecord,
        purpose: str,
        policy: RetryPolicy,
        on_text: TextCallback | None,
        on_retry: RetryCallback | None,
        on_failover: FailoverCallback | None,
    ) -> ProviderResponse:
        """The same request to each fallback in turn, until one answers (``primary`` failed with
        ``outage.error``); a spend limit stops it there."""
        for fallback in fallbacks:
            answered_by = FailedOver(primary.model, fallback.model, failure_reason(outage.error))
            if on_failover is not None:
                await on_failover(answered_by)
            try:
                response = await self._send(fallback, request, session, purpose, policy, on_text, on_retry)
            except OverBudget:
                raise
            except ProviderError as error:
                log.warning(
                    "session %s: fallback model %s failed too (%s, status=%s: %s)",
                    session.id, fallback.model, error.kind, error.status, error,
                )  # fmt: skip
                continue
            log.info(
                "session %s: a %s request answered by fallback model %s (%s %s)",
                session.id, purpose, fallback.model, primary.model, answered_by.reason,
            )  # fmt: skip
            return replace(response, failed_over=answered_by)
        raise _again(outage.error)

    async def _send(
        self,
        provider: Provider,
        request: ProviderRequest,
        session: SessionRecord,
        purpose: str,
        policy: RetryPolicy,
        on_text: TextCallback | None = None,
        on_retry: RetryCallback | None = None,
    ) -> ProviderResponse:
        """Steps 1 to 4 of the module's docstring, for one model: each attempt is admitted, recorded and
        settled on its own (a retry is another request the provider may bill)."""
        return await call_with_retries(
            lambda: self._attempt(provider, request, session, purpose, on_text),
            policy,
            name=f"provider {provider.name}",
            on_retry=on_retry,
        )

    async def _attempt(
        self,
        provider: Provider,
        request: ProviderRequest,
        session: SessionRecord,
        purpose: str,
        on_text: TextCallback | None,
    ) -> ProviderResponse:
        """One attempt: reserve what it can cost, with ``max_tokens`` lowered to what its scopes can still
        pay (``agent.spending.estimate``), send it, record and settle what the provider billed."""
        info = self.model_info(provider.model)
        price = request_price(request, info, cached_tokens=self._cached(request, provider.model))
        admission = await self.gate.admit(price.least, price.most)
        tokens = price.tokens_for(admission.granted)
        if tokens < request.max_tokens:
            log.info(
                "session %s: max_tokens %d lowered to %d: that is what its spend limits can still pay",
                session.id, request.max_tokens, tokens,
            )  # fmt: skip
            request = replace(request, max_tokens=tokens)
        progress = StreamProgress()
        sent = _Sent(session, provider, request, purpose, self.clock())
        try:
            response = await send_once(
                provider, request, limiter=self.limiter, on_text=on_text, progress=progress
            )
        except asyncio.CancelledError:  # a stopped answer was still paid for: count it
            await asyncio.shield(self._finish(sent, admission, progress.usage(request), answered=False))
            raise
        except ProviderError:  # a stream that broke after the provider billed it is counted as billed
            await asyncio.shield(self._finish(sent, admission, _billed(progress, request), answered=False))
            raise
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        await self._finish(sent, admission, response.usage, answered=True)
        return replace(response, max_tokens=tokens) if tokens < price.max_tokens else response

    async def _batched(
        self,
        provider: Provider,
        request: ProviderRequest,
        session: SessionRecord,
        purpose: str,
        mode: Batching,
    ) -> ProviderResponse | None:
        """``request`` through the batch API at half price: admitted until its deadline, recorded when
        its answer comes (once, also across a restart). None: given up, send it normally."""
        assert self.batches is not None
        digest = request_digest(provider, request)  # as asked: the same request after a restart finds it
        info = self.model_info(provider.model)
        price = request_price(request, info, cached_tokens=self._cached(request, provider.model), batch=True)
        lasts = max(0.0, mode.deadline - self.clock()) + BATCH_HOLD_MARGIN
        admission = await self.gate.admit(price.least, price.most, lasts=lasts)
        tokens = price.tokens_for(admission.granted)
        if tokens < request.max_tokens:
            request = replace(request, max_tokens=tokens)
        try:
            waited = await self.batches.answer(
                provider, request, digest=digest, session_id=session.id, purpose=purpose, mode=mode
            )
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        if waited is None or waited.billed:  # given up; or answered and billed before a restart
            await self.gate.release(admission)
            return None if waited is None else waited.response
        sent = _Sent(session, provider, request, purpose, self.clock())  # when its answer was seen
        await self._finish(sent, admission, waited.response.usage, answered=True, batch=True)
        await self.batches.recorded(waited)
        return replace(waited.response, max_tokens=tokens) if tokens < price.max_tokens else waited.response

    def _start_probe(self, primary: Provider, session: SessionRecord) -> None:
        """Probe ``primary`` in a task of its own, recorded in ``session`` (whose request found it due)
        and charged like that request (the task inherits its charge)."""
        task = asyncio.create_task(self._probe(primary, session), name=f"probe of {primary.model}")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _probe(self, primary: Provider, session: SessionRecord) -> None:
        failover = self.failover
        assert failover is not None, "probes are started only with fallbacks"
        try:
            await self._send(primary, probe_request(session.id), session, PROBE, PROBE_POLICY)
        except OverBudget as refusal:
            log.info("model %s: no probe for now: %s", primary.model, refusal)
            failover.postpone(primary, self.clock())
        except ProviderError as error:  # a request refused as invalid was still answered: it is back
            failover.probed(primary, error if fails_over(error) else None, self.clock())
        except Exception:  # a database away, a bug: the outage stays, the next probe is an interval away
            log.exception("model %s: the probe failed unexpectedly", primary.model)
            failover.postpone(primary, self.clock())
        else:
            failover.probed(primary, None, self.clock())

    async def aclose(self) -> None:
        """Stop the probes in flight (at shutdown)."""
        probes = list(self._probes)
        for probe in probes:
            probe.cancel()
        if probes:
            await asyncio.wait(probes)

    async def speak(
        self,
        synthesizer: Synthesizer,
        text: str,
        *,
        session: SessionRecord,
        policy: RetryPolicy,
        timeout: float,  # noqa: ASYNC109 - one bound on every attempt and the waits between them
    ) -> bytes:
        """``text`` spoken by ``synthesizer`` on behalf of ``session`` (a spoken reply), as an audio file:
        a :meth:`pay` of its price per character, retried as ``policy`` says within ``timeout``."""
        call = ServiceCall(
            purpose=SPEECH_PURPOSE,
            provider=synthesizer.provider,
            model=synthesizer.model,
            price=synthesizer.cost(text),
            send=lambda: call_with_retries(lambda: synthesizer.synthesize(text), policy, name="speech"),
            characters=len(text),
        )
        return await self.pay(call, session_id=session.id, timeout=timeout)

    async def pay(self, call: ServiceCall[T], *, session_id: str, timeout: float) -> T:  # noqa: ASYNC109
        """Send ``call`` (a paid service that is not a model: ``agent.paid``) on behalf of the session
        ``session_id``, charged like its model requests (to the current ``Charge``).

        The gate admits ``call.price`` before anything is sent; the cost the answer reports (``billed``)
        is recorded and settled after. Raises ``OverBudget`` (nothing sent), ``ProviderError`` with kind
        "timeout" after ``timeout`` seconds, or what ``call.send`` raised; a failed call is not recorded
        (the services bill what they delivered)."""
        admission = await self.gate.admit(call.price)
        sent_at = self.clock()
        try:
            async with asyncio.timeout(timeout):
                result = await call.send()
        except TimeoutError:
            await asyncio.shield(self.gate.release(admission))
            raise ProviderError(
                f"no {call.purpose} within {timeout:g} s", retryable=False, kind="timeout"
            ) from None
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        cost = call.price if call.billed is None else call.billed(result)
        record = service_usage(call.purpose, call.provider, call.model, cost, characters=call.characters)
        try:
            recorded = await self.store.usage.record(
                session_id, record, at=self.clock(), sent_at=sent_at, spend=admission.keys
            )
        except BaseException:
            await asyncio.shield(self.gate.release(admission))
            raise
        await self.gate.settle(admission, cost, recorded.spent)
        return result

    async def _finish(
        self, sent: _Sent, admission: Admission, usage: Usage | None, *, answered: bool, batch: bool = False
    ) -> None:
        """Record ``usage`` (None: nothing was sent; ``batch``: at batch prices) and settle the admission
        (the reservation is dropped whatever happens); an ``answered`` request's cache read is judged too."""
        if usage is None:
            await self.gate.release(admission)
            return
        provider, request = sent.provider, sent.request
        info = self.model_info(provider.model)
        record = priced(sent.purpose, provider.name, provider.model, info, usage, batch=batch)
        now = self.clock()
        try:
            recorded = await self.store.usage.record(
                sent.session.id, record, at=now, sent_at=sent.at, spend=admission.keys
            )
        except BaseException:
            await self.gate.release(admission)
            raise
        if sent.purpose != PROBE:  # a probe is not the session's prompt: it neither says what is cached
            self._remember(request.session_id, provider.model, usage.prompt_tokens)
        await self.gate.settle(admission, record.cost, recorded.spent)
        if answered and self.cache_watch is not None and sent.purpose != PROBE:
            exchange = Exchange(sent.session, provider, request, record, recorded.request_id, sent.at, now)
            await self.cache_watch.observe(exchange)

    def _cached(self, request: ProviderRequest, model: str) -> int:
        """What of ``request`` the cache of ``model`` should still hold: its session's previous request
        to that model, if that was sent within the TTL (as far as this process knows)."""
        size, sent_at = self._last_sent.get((request.session_id, model), (0, 0.0))
        ttl = ONE_HOUR if request.prefix_ttl == "1h" else FIVE_MINUTES
        return size if self.clock() - sent_at < ttl else 0

    def _remember(self, session_id: str, model: str, prompt_tokens: int) -> None:
        key = (session_id, model)
        self._last_sent[key] = (prompt_tokens, self.clock())
        self._last_sent.move_to_end(key)
        while len(self._last_sent) > REMEMBERED_SESSIONS:
            self._last_sent.popitem(last=False)
