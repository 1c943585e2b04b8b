"""The cache-miss check every answered model request goes through, whatever its purpose.

The request paths (the turn loop, side tasks, the summary call) hand each answered request to
:meth:`CacheWatch.observe` once its usage is recorded. The watch rebuilds what was sent as the cache
sees it (:mod:`agent.cache_misses.chain`; the body without the bytes of files), reads what the chat's
recent requests left in the cache (one query), judges the provider's reported read
(:mod:`agent.cache_misses.diagnosis`) and stores, in one transaction, what this request leaves for the
next ones and the miss event if there was one. Records live in the database, so the check holds across
restarts and processes.

The check is diagnostics: it never fails the request it watches. A failure of its own is logged and the
request goes on; what it could not store only makes later expectations more modest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from agent.cache_misses.chain import request_chain, wire_groups
from agent.cache_misses.diagnosis import (
    CAUSE_LABELS,
    Anchor,
    Judged,
    Thresholds,
    anchor_of,
    confirmed_read,
    diagnose,
    marks_for,
    missed_cost,
)
from agent.cache_misses.reads import Entry, by_digest, left_behind
from agent.model.provider import Provider, ProviderRequest
from agent.models import ModelInfo
from agent.store.cache_misses import CacheMiss, CacheMissLog, PrefixRecord
from agent.store.sessions import SessionRecord
from agent.usage import RequestUsage

log = logging.getLogger(__name__)

MissListener = Callable[[CacheMiss], None]


@dataclass(frozen=True)
class Exchange:
    """One answered model request, as the check needs it."""

    session: SessionRecord  # the session it was made for (a side task's and a summary's: the parent's)
    provider: Provider  # the client that sent it: its wire format and model
    request: ProviderRequest
    usage: RequestUsage  # as recorded: purpose, reported usage, cost
    request_id: int | None  # its row in ``requests``
    sent_at: float  # before the first attempt
    answered_at: float


class CacheWatch:
    """Judges each answered request's cache read; ``on_miss`` listeners hear of every miss found."""

    def __init__(
        self, misses: CacheMissLog, model_info: Callable[[str], ModelInfo], thresholds: Thresholds
    ) -> None:
        self.misses = misses
        self.model_info = model_info
        self.thresholds = thresholds
        self._listeners: list[MissListener] = []

    def on_miss(self, listener: MissListener) -> None:
        """Call ``listener`` (synchronously, so keep it quick) with every miss found from now on."""
        self._listeners.append(listener)

    async def observe(self, exchange: Exchange) -> CacheMiss | None:
        """Judge ``exchange`` and remember what it left in the cache; returns the miss, if it was one."""
        try:
            miss = await self._observe(exchange)
        except Exception as error:  # diagnostics must never fail the request it watches
            log.warning(
                "session %s: the cache-miss check of a %s request failed (%s: %s); the request is unaffected",
                exchange.session.id, exchange.usage.purpose, type(error).__name__, error,
            )  # fmt: skip
            return None
        if miss is not None:
            for listener in self._listeners:
                listener(miss)
        return miss

    async def _observe(self, exchange: Exchange) -> CacheMiss | None:
        usage, provider, session = exchange.usage.usage, exchange.provider, exchange.session
        if usage.prompt_tokens <= 0:  # a server that reports no usage: nothing to compare with
            return None
        messages = exchange.request.messages
        body = provider.build_body(exchange.request, with_files=False)
        files = {media.sha256: media.tokens for message in messages for media in message.media}
        chain = request_chain(provider.api, body, files).scaled(usage.prompt_tokens)
        groups = wire_groups(provider.api, [message.role for message in messages])
        marks = marks_for(groups, [message.id for message in messages], chain.group_ends())
        info = self.model_info(provider.model)
        judged = Judged(
            chain=chain,
            model=provider.model,
            min_tokens=info.min_cache_tokens,
            sent_at=exchange.sent_at,
            answered_at=exchange.answered_at,
            read_tokens=usage.cache_read_tokens,
            marks=marks,
        )
        judge = _Judge(exchange, judged, info, self.thresholds)
        wanted = {position.digest for position in chain.positions}
        miss = await self.misses.record(session.session_key, session.id, wanted, judge)
        if judge.prompt_changed:
            log.error(
                "session %s: its tool list or system prompt changed since its previous request: the provider "
                "cannot reuse its cache (a bug: a session's prompt bytes are never rebuilt)",
                session.id,
            )
        if miss is not None:
            log.info(
                "session %s: cache miss (%s) on a %s request: read %d of %d tokens, %d missed ($%.4f): %s",
                session.id, CAUSE_LABELS[miss.cause], miss.purpose, miss.read_tokens, miss.expected_tokens,
                miss.missed_tokens, miss.missed_usd, miss.detail,
            )  # fmt: skip
        return miss


@dataclass
class _Judge:
    """Decides a request's prefix record and miss from what the chat's earlier requests left in the
    cache; called by the store inside the transaction that reads those and stores the result."""

    exchange: Exchange
    judged: Judged
    info: ModelInfo
    thresholds: Thresholds
    prompt_changed: bool = False

    def __call__(self, entries: list[Entry], anchor: Anchor | None) -> tuple[PrefixRecord, CacheMiss | None]:
        exchange, judged = self.exchange, self.judged
        diagnosis = diagnose(judged, entries, anchor, self.thresholds)
        self.prompt_changed = diagnosis.prompt_changed
        verdict = diagnosis.verdict
        maybe_cached = by_digest(e for e in entries if e.model == judged.model and e.expires > judged.sent_at)
        read = None if verdict is not None and verdict.cause == "evicted" else diagnosis.expected
        left = left_behind(
            judged.chain,
            alive=maybe_cached,
            hit=read,
            min_tokens=judged.eligible_tokens,
            model=judged.model,
            session_id=exchange.session.id,
            sent_at=judged.sent_at,
            confirmed=confirmed_read(judged, read),
        )
        record = PrefixRecord(
            session_key=exchange.session.session_key,
            session_id=exchange.session.id,
            model=judged.model,
            sent_at=judged.sent_at,
            entries=left,
            anchor=anchor_of(judged.chain, judged.marks, left, judged.eligible_tokens, judged.model),
        )
        if verdict is None:
            return record, None
        return record, CacheMiss(
            session_key=exchange.session.session_key,
            session_id=exchange.session.id,
            request_id=exchange.request_id,
            purpose=exchange.usage.purpose,
            model=judged.model,
            cause=verdict.cause,
            expected_tokens=verdict.expected_tokens,
            read_tokens=verdict.read_tokens,
            missed_tokens=verdict.missed_tokens,
            missed_usd=missed_cost(verdict.missed_tokens, exchange.usage.usage, self.info),
            detail=verdict.detail,
            created_at=exchange.answered_at,
        )
