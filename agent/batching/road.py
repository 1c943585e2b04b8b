"""One request through a batch API: submit it (or find the batch a run before a restart submitted), poll
until it ends, read its answer; or give up on it, so the caller sends the request normally.

- The body is the normal request's (``Provider.build_body``), so the batch reads and writes the same
  cache entries. Its digest finds it again: a run resumed after a restart builds the same request and
  polls the batch it submitted instead of paying for another (``agent.store.batches``).
- Polls come after waits of the one backoff (``resilience.backoff``: :data:`POLLS`, from a few seconds
  growing to minutes, for batches that take minutes to an hour), each call bounded by
  :data:`CALL_TIMEOUT`; a poll that fails is tried again after the next wait. The wait happens in the
  task that needs the answer (a job's run, holding its lock; a review), so it ends with that task.
- Given up (the caller falls back to a normal request, once): the deadline passed (the batch is cancelled,
  best effort), the batch ended without an answer (errored, expired, cancelled), the provider has no batch
  API, or the submission failed. Each says why in one log line.
- A task cancelled while it waits: a batch that belongs to a run outliving its process (``Batching.run``)
  is kept for the restarted run; any other is cancelled, best effort.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from agent.batching.mode import Batching
from agent.model.provider import (
    BatchFailed,
    BatchUnsupported,
    Provider,
    ProviderError,
    ProviderRequest,
    ProviderResponse,
)
from agent.providers.batches import response_from_json, response_json
from agent.store.batches import BatchRecord, BatchRequests, BatchState
from resilience.backoff import Backoff, Streak

log = logging.getLogger(__name__)

POLLS = Backoff(first=5.0, cap=300.0)  # between polls of a batch: most end within the hour
CALL_TIMEOUT = 60.0  # seconds: one call to the batch API (submit, poll, results, cancel)

T = TypeVar("T")


def request_digest(provider: Provider, request: ProviderRequest) -> str:
    """What identifies a request: the digest of the body it sends (files as stored placeholders)."""
    body = provider.build_body(request, with_files=False)
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"{provider.name}\n{text}".encode()).hexdigest()


@dataclass(frozen=True)
class Waited:
    """A batch's answer: ``billed`` when its usage was recorded already (before a restart)."""

    response: ProviderResponse
    custom_id: str
    billed: bool


class BatchRoad:
    def __init__(
        self,
        store: BatchRequests,
        *,
        polls: Backoff = POLLS,
        call_timeout: float = CALL_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.polls = polls
        self.call_timeout = call_timeout
        self.clock = clock
        self._unsupported: set[str] = set()  # providers that answered they have no batch API

    async def answer(
        self,
        provider: Provider,
        request: ProviderRequest,
        *,
        digest: str,
        session_id: str,
        purpose: str,
        mode: Batching,
    ) -> Waited | None:
        """The batch's answer to ``request`` (``digest``: :func:`request_digest` of it as asked), or None:
        give up, send it normally (logged here)."""
        found = await self.store.find(session_id, digest)
        if found is not None and found.response is not None:
            billed = found.state is BatchState.RECORDED
            return Waited(response_from_json(found.response), found.custom_id, billed)
        if found is None:
            # A batch submitted is recorded even when the task is cancelled meanwhile (a shutdown): the
            # restarted run finds it instead of paying for another.
            submit = self._submit(provider, request, digest, session_id, purpose, mode)
            submitting = asyncio.ensure_future(submit)
            try:
                found = await asyncio.shield(submitting)
            except asyncio.CancelledError:
                await asyncio.wait([submitting], timeout=self.call_timeout)
                raise
            if found is None:
                return None
        else:
            log.info("session %s: waiting on for batch %s, sent before a restart", session_id, found.batch_id)
        try:
            return await self._wait(provider, found)
        except asyncio.CancelledError:
            if mode.run is None:
                await asyncio.shield(self._give_up(provider, found, "its task was cancelled"))
            raise

    async def _submit(
        self,
        provider: Provider,
        request: ProviderRequest,
        digest: str,
        session_id: str,
        purpose: str,
        mode: Batching,
    ) -> BatchRecord | None:
        if provider.name in self._unsupported:
            return None
        now = self.clock()
        if now >= mode.deadline:
            log.info("session %s: a %s request is sent normally: its deadline passed", session_id, purpose)
            return None
        custom_id = f"herald-{secrets.token_hex(12)}"
        try:
            batch_id = await self._call(provider.submit_batch(request, custom_id))
        except BatchUnsupported as error:
            self._unsupported.add(provider.name)
            log.info("provider %s: requests that can wait are sent normally: %s", provider.name, error)
            return None
        except ProviderError as error:
            log.warning(
                "session %s: a %s request is sent normally: its batch could not be submitted (%s: %s)",
                session_id, purpose, error.kind, error,
            )  # fmt: skip
            return None
        record = BatchRecord(
            custom_id=custom_id,
            session_id=session_id,
            purpose=purpose,
            provider=provider.name,
            model=provider.model,
            digest=digest,
            run=mode.run,
            batch_id=batch_id,
            state=BatchState.WAITING,
            response=None,
            submitted_at=now,
            deadline_at=mode.deadline,
        )
        await self.store.add(record, now)
        log.info("session %s: a %s request waits in batch %s at half price", session_id, purpose, batch_id)
        return record

    async def _wait(self, provider: Provider, record: BatchRecord) -> Waited | None:
        """Poll until the batch ends or its deadline (the one it was submitted with) passes."""
        streak = Streak(self.polls)
        while True:
            left = record.deadline_at - self.clock()
            if left <= 0:
                await self._give_up(provider, record, "its deadline passed before the batch ended")
                return None
            try:
                if await self._call(provider.batch_ended(record.batch_id)):
                    answer = await self._call(provider.batch_result(record.batch_id, record.custom_id))
                    if isinstance(answer, BatchFailed):
                        why = f"the batch ended without an answer ({answer.reason})"
                        await self._give_up(provider, record, why, cancel=False)
                        return None
                    await self.store.ended(record.custom_id, response_json(answer), self.clock())
                    return Waited(answer, record.custom_id, billed=False)
            except ProviderError as error:
                log.info("batch %s: a poll failed (%s: %s); polling on", record.batch_id, error.kind, error)
            await asyncio.sleep(max(0.0, min(streak.next_delay(), left)))

    async def recorded(self, waited: Waited) -> None:
        """Its usage is recorded: the answer is never billed again (a restart may still give it)."""
        await self.store.recorded(waited.custom_id, self.clock())

    async def _give_up(
        self, provider: Provider, record: BatchRecord, why: str, *, cancel: bool = True
    ) -> None:
        """Cancel the batch (best effort, unless it ended) and mark it abandoned: the request goes the
        normal way."""
        log.warning(
            "session %s: batch %s given up, the %s request is sent normally: %s",
            record.session_id, record.batch_id, record.purpose, why,
        )  # fmt: skip
        if cancel:
            try:
                await self._call(provider.cancel_batch(record.batch_id))
            except ProviderError as error:
                log.info("batch %s: could not be cancelled (%s); it ends on its own", record.batch_id, error)
        await self.store.abandon(record.custom_id, self.clock())

    async def _call(self, call: Awaitable[T]) -> T:
        """One call to the batch API, within :attr:`call_timeout`."""
        try:
            async with asyncio.timeout(self.call_timeout):
                return await call
        except TimeoutError:
            raise ProviderError(
                f"no answer from the batch API within {self.call_timeout:g} s", retryable=True, kind="timeout"
            ) from None
