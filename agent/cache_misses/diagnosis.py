"""What a request should have read from the cache, whether it missed, why, and what the miss cost.

Three figures are compared for each answered request:

- the **read reported** by the provider;
- the **expected read**: the longest prefix of this request an earlier request of the chat left in the
  provider's cache, on this model, still inside its TTL, reachable under the provider's rules
  (:mod:`agent.cache_misses.reads`). Less than that read is the provider's doing: **evicted**;
- the **possible read**: the same without the TTL and the model (a pause too long: **ttl_expired**; the
  chat moved to another model: **model_changed**), and, within the session, what the previous request
  that sent the session's history cached of it: when that request went to another model (a fallback
  model answered while the session's own was failing, or the other way back), none of it could be read
  (**model_changed**, whatever bytes the other provider's wire format gave it); otherwise, when this
  request sends that history again with other bytes, the tools or system prompt changed
  (**prompt_changed**, a bug: cache invariant 1), the history was compressed (**compression**, the one
  sanctioned rewrite) or messages already sent changed (**history_edited**).

A shortfall of at least ``Thresholds`` is a :class:`Verdict`. Timing errs on the safe side: an entry
counts as held only if it outlives the request's answer counted from its own request's send, so a
request racing an expiry is blamed on the TTL, never on the provider.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from agent.cache_misses.chain import Chain
from agent.cache_misses.reads import Entry, Hit, by_digest, openai_cached_tokens, read
from agent.models import ModelInfo
from agent.usage import Usage

Cause = Literal["ttl_expired", "model_changed", "prompt_changed", "compression", "history_edited", "evicted"]
CAUSES: tuple[Cause, ...] = (
    "ttl_expired",
    "model_changed",
    "prompt_changed",
    "compression",
    "history_edited",
    "evicted",
)
CAUSE_LABELS: dict[Cause, str] = {
    "ttl_expired": "TTL expired",
    "model_changed": "model changed",
    "prompt_changed": "tools/system prompt changed",
    "compression": "compression",
    "history_edited": "history edited",
    "evicted": "provider evicted",
}
MIN_TOKENS_MARGIN = 0.1  # a prefix within 10% of the model's minimum may be under it: expect nothing there


@dataclass(frozen=True)
class Thresholds:
    """A shortfall is a miss when it is at least ``min_tokens`` and ``min_share`` of the possible read
    (token counts are estimates: small differences are noise, not misses)."""

    min_tokens: int = 1024
    min_share: float = 0.1

    def exceeded(self, missed: int, possible: int) -> bool:
        return missed > 0 and missed >= max(self.min_tokens, self.min_share * possible)


@dataclass(frozen=True)
class Anchor:
    """Where the session's latest request that sent its stored history left that history."""

    message_id: int  # the last stored message it sent (before any message of its own task)
    message_count: int  # how many stored messages it sent through that one
    digest: str  # the prefix digest through that message
    tokens: int  # the longest prefix it left cached within that history
    prompt_digest: str  # the prefix digest through the tools and system blocks
    model: str  # the model it went to: only that model's cache holds what it left


@dataclass(frozen=True)
class HistoryMark:
    """A stored message that ends one of this request's wire messages."""

    index: int  # its last position in the chain
    count: int  # stored messages sent through it
    newest: int  # the highest message id among them (a higher one than the message's own: inserted)


@dataclass(frozen=True)
class Judged:
    """The request being judged, as sent and as answered."""

    chain: Chain  # token estimates scaled to the provider's reported prompt size
    model: str
    min_tokens: int  # the model's minimum cacheable prefix
    sent_at: float
    answered_at: float
    read_tokens: int  # as the provider reported
    marks: Mapping[int, HistoryMark]  # by message id: where the stored history it sends ends up

    @property
    def prompt_digest(self) -> str | None:
        end = self.chain.prompt_end
        return self.chain.positions[end].digest if end >= 0 else None

    @property
    def eligible_tokens(self) -> int:
        return math.ceil(self.min_tokens * (1 + MIN_TOKENS_MARGIN))


@dataclass(frozen=True)
class Verdict:
    cause: Cause
    expected_tokens: int  # what the request should have read
    read_tokens: int  # what the provider reported
    missed_tokens: int
    detail: str  # one line for the operator


@dataclass(frozen=True)
class Diagnosis:
    expected: Hit | None  # the read the provider should have served
    verdict: Verdict | None
    prompt_changed: bool  # the session's prompt bytes differ from its previous request's (a bug)


def held(entries: Iterable[Entry], model: str, at: float) -> dict[str, Entry]:
    """The entries surely still in the provider's cache at ``at`` for ``model``, by digest."""
    return by_digest(e for e in entries if e.model == model and e.expires > at)


def diagnose(
    judged: Judged, entries: Iterable[Entry], anchor: Anchor | None, thresholds: Thresholds
) -> Diagnosis:
    """Compare ``judged``'s reported read with what ``entries`` (the chat's earlier requests left in the
    cache) and ``anchor`` (the session's latest request that sent its history) say it should be."""
    entries = list(entries)
    minimum = judged.eligible_tokens
    expected = read(judged.chain, held(entries, judged.model, judged.answered_at), minimum)
    should = expected.tokens if expected else 0
    got = judged.read_tokens
    intent = _intended(judged, anchor)
    prompt_changed = intent is not None and intent[0] == "prompt_changed"
    if thresholds.exceeded(should - got, should):
        detail = f"the provider held {should:,} tokens of this prompt within their TTL and read {got:,}"
        return Diagnosis(expected, Verdict("evicted", should, got, should - got, detail), prompt_changed)

    possible = read(judged.chain, by_digest(entries, prefer_model=judged.model), minimum)
    best, cause, detail = should, None, ""
    if possible is not None and possible.tokens > best:
        best = possible.tokens
        cause, detail = _lapsed(judged, possible.entry)
    if intent is not None and intent[1] > best:
        cause, best, detail = intent
    if cause is None or not thresholds.exceeded(best - got, best):
        return Diagnosis(expected, None, prompt_changed)
    return Diagnosis(expected, Verdict(cause, best, got, best - got, detail), prompt_changed)


def _lapsed(judged: Judged, entry: Entry) -> tuple[Cause, str]:
    """Why a prefix this request repeats was not in the cache: another model, or its TTL ran out."""
    if entry.model != judged.model:
        return (
            "model_changed",
            f"the prefix was cached for {entry.model}, this request went to {judged.model}",
        )
    idle = judged.sent_at - entry.used_at
    return (
        "ttl_expired",
        f"idle {duration(idle)} since the prefix was last used; its TTL is {duration(entry.ttl)}",
    )


def _intended(judged: Judged, anchor: Anchor | None) -> tuple[Cause, int, str] | None:
    """What this request should have repeated of the session's previous history request but sent with
    other bytes: the cause, the tokens that request had cached of it, a detail. None when it repeated it
    intact (the cache rules judge it), when it sends no stored history (a sub-agent's task), or when
    that request's history left the conversation (a failed or interrupted turn)."""
    if anchor is None or not judged.marks:
        return None
    tokens = min(anchor.tokens, judged.chain.total_tokens)
    if anchor.model != judged.model:  # another model's cache, and maybe another wire format: not a bug
        return (
            "model_changed",
            tokens,
            f"the session's previous request went to {anchor.model}, this one to {judged.model}",
        )
    if judged.prompt_digest != anchor.prompt_digest:
        return (
            "prompt_changed",
            tokens,
            "the tool list or system prompt differs from the session's previous request",
        )
    mark = judged.marks.get(anchor.message_id)
    if mark is None or judged.chain.positions[mark.index].digest == anchor.digest:
        return None
    if mark.count != anchor.message_count or mark.newest > anchor.message_id:
        return "compression", tokens, "the history was compressed since the previous request"
    return "history_edited", tokens, "messages sent before were sent again with other bytes"


CONFIRMING_SHARE = 0.1  # a reported read this close to the expected one is that read


def confirmed_read(judged: Judged, hit: Hit | None) -> int | None:
    """The provider's reported read when it is the expected ``hit`` (on Anthropic, where a read is one
    whole cached prefix): the exact size of that prefix, which the estimate only approached."""
    if hit is None or not judged.chain.marked or judged.read_tokens <= 0:
        return None
    close = abs(judged.read_tokens - hit.tokens) <= CONFIRMING_SHARE * hit.tokens
    return judged.read_tokens if close else None


def anchor_of(
    chain: Chain, marks: Mapping[int, HistoryMark], left: Iterable[Entry], min_tokens: int, model: str
) -> Anchor | None:
    """The anchor a request to ``model`` leaves for the next one: the end of the stored history it sent,
    with the longest prefix it cached within it. None when it sent no stored history."""
    if not marks:
        return None
    message_id, mark = max(marks.items(), key=lambda item: item[1].index)
    prompt_end = chain.prompt_end
    if prompt_end < 0:
        return None
    end = chain.positions[mark.index]
    if chain.marked:
        within = {p.digest for p in chain.positions[: mark.index + 1]}
        tokens = max((e.tokens for e in left if e.digest in within), default=0)
    else:
        tokens = openai_cached_tokens(end.tokens) if end.tokens >= min_tokens else 0
    return Anchor(message_id, mark.count, end.digest, tokens, chain.positions[prompt_end].digest, model)


def missed_cost(missed_tokens: int, usage: Usage, info: ModelInfo) -> float:
    """USD the missed tokens cost over reading them: they were paid at the request's blend of uncached
    input and cache-write prices instead of the cache-read price."""
    paid = usage.input_tokens + usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
    if paid > 0:
        rate = (
            usage.input_tokens * info.input
            + usage.cache_write_5m_tokens * info.cache_write_5m
            + usage.cache_write_1h_tokens * info.cache_write_1h
        ) / paid
    else:
        rate = info.input
    return missed_tokens * max(0.0, rate - info.cache_read) / 1_000_000


def duration(seconds: float) -> str:
    """``12m 30s``, ``1h``, ``45s``: a pause or a TTL for the operator."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return " ".join(p for p in parts if p) or "0s"


def marks_for(
    groups: list[list[int]], ids: list[int | None], ends: Mapping[int, int]
) -> dict[int, HistoryMark]:
    """Where the leading run of stored messages ends each wire message.

    ``groups``: the request's messages (by index) behind each wire message; ``ids``: each message's
    stored id (None for a message that is not stored, such as a side task's own task); ``ends``: the
    last chain position of each wire message. The run stops at the first message that is not stored.
    """
    marks: dict[int, HistoryMark] = {}
    count = newest = 0
    for group_index, members in enumerate(groups):
        for member in members:
            message_id = ids[member]
            if message_id is None:
                return marks
            count += 1
            newest = max(newest, message_id)
        last = ids[members[-1]]
        if last is not None and group_index in ends:
            marks[last] = HistoryMark(ends[group_index], count, newest)
    return marks
