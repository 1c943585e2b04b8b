"""Which earlier prefix a request can read from a provider's cache, and which prefixes it leaves there.

The rules follow the providers' documentation (shared/notes/providers.md):

- Anthropic (a :class:`~agent.cache_misses.chain.Chain` that is ``marked``): a prefix is cached only at
  a breakpoint, and only when it is at least the model's minimum cacheable length. A read happens at a
  breakpoint: the provider checks that position and walks back at most 20 positions for a prefix an
  earlier request cached; the longest such hit over all breakpoints is read. An entry lives its TTL
  (5m or 1h, per breakpoint) after it was written or last read.
- OpenAI (automatic caching): every prompt of at least 1,024 tokens is cached as a whole; a later
  prompt reads its longest cached prefix, counted in 128-token steps beyond 1,024. Idle entries live
  5 to 10 minutes: the lower bound is what a request can count on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.cache_misses.chain import Chain

LOOKBACK = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
OPENAI_MIN_TOKENS = 1024
OPENAI_STEP = 128
OPENAI_TTL = 300.0


@dataclass(frozen=True)
class Entry:
    """A prefix the provider should hold for a while because an earlier request wrote or read it."""

    digest: str
    tokens: int
    ttl: float  # seconds it lives after its last use
    used_at: float  # when the request that used it was sent (the earliest it can have been used)
    model: str
    session_id: str

    @property
    def expires(self) -> float:
        return self.used_at + self.ttl


@dataclass(frozen=True)
class Hit:
    """A read: it ends at position ``index`` of the reading request and counts ``tokens``: the size
    recorded with the entry (the request that left it knew it best: its own whole prompt is the size the
    provider reported for it), in the provider's steps."""

    index: int
    tokens: int
    entry: Entry


def by_digest(entries: Iterable[Entry], prefer_model: str | None = None) -> dict[str, Entry]:
    """One entry per prefix: the one on ``prefer_model`` if any, else the one that lives longest."""

    def rank(entry: Entry) -> tuple[bool, float]:
        return (entry.model == prefer_model, entry.expires)

    chosen: dict[str, Entry] = {}
    for entry in entries:
        current = chosen.get(entry.digest)
        if current is None or rank(entry) > rank(current):
            chosen[entry.digest] = entry
    return chosen


def openai_cached_tokens(tokens: int) -> int:
    """What automatic caching reports for a cached prefix of ``tokens``: 128-token steps from 1,024."""
    if tokens < OPENAI_MIN_TOKENS:
        return 0
    return OPENAI_MIN_TOKENS + (tokens - OPENAI_MIN_TOKENS) // OPENAI_STEP * OPENAI_STEP


def read(chain: Chain, cached: Mapping[str, Entry], min_tokens: int) -> Hit | None:
    """The read ``chain`` gets from a cache holding ``cached`` (by digest); None when nothing."""
    if chain.marked:
        return _anthropic_read(chain, cached, min_tokens)
    return _openai_read(chain, cached, max(min_tokens, OPENAI_MIN_TOKENS))


def _anthropic_read(chain: Chain, cached: Mapping[str, Entry], min_tokens: int) -> Hit | None:
    positions = chain.positions
    best: Hit | None = None
    for point in chain.breakpoints():
        if positions[point].tokens < min_tokens:
            continue
        for index in range(point, max(point - LOOKBACK, 0) - 1, -1):
            if best is not None and index <= best.index:
                break
            entry = cached.get(positions[index].digest)
            if entry is not None:
                best = Hit(index, entry.tokens, entry)
                break
    return best


def _openai_read(chain: Chain, cached: Mapping[str, Entry], min_tokens: int) -> Hit | None:
    for index in range(len(chain.positions) - 1, -1, -1):
        position = chain.positions[index]
        if position.tokens < min_tokens:
            return None
        entry = cached.get(position.digest)
        if entry is not None:
            return Hit(index, openai_cached_tokens(entry.tokens), entry)
    return None


def left_behind(
    chain: Chain,
    *,
    alive: Mapping[str, Entry],
    hit: Hit | None,
    min_tokens: int,
    model: str,
    session_id: str,
    sent_at: float,
    confirmed: int | None = None,
) -> list[Entry]:
    """The entries a request leaves in the cache: the one it read (its TTL starts again) and, on
    Anthropic, each breakpoint that was not cached before (a write); on OpenAI its whole prompt and
    its tools and system prompt. ``alive``: what was surely cached when it was sent. ``confirmed``: the
    read the provider reported when it is the ``hit``: the exact size of that prefix, kept from now on."""

    def entry(index: int, ttl: float, tokens: int | None = None) -> Entry:
        position = chain.positions[index]
        return Entry(position.digest, tokens or position.tokens, ttl, sent_at, model, session_id)

    left: dict[str, Entry] = {}
    if hit is not None:
        left[hit.entry.digest] = entry(hit.index, hit.entry.ttl, confirmed or hit.entry.tokens)
    if chain.marked:
        for point in chain.breakpoints():
            position = chain.positions[point]
            ttl = position.ttl
            if ttl is not None and position.tokens >= min_tokens and position.digest not in alive:
                left.setdefault(position.digest, entry(point, TTL_SECONDS[ttl]))
    else:
        for index in {chain.prompt_end, len(chain.positions) - 1}:
            if index >= 0 and chain.positions[index].tokens >= max(min_tokens, OPENAI_MIN_TOKENS):
                left.setdefault(chain.positions[index].digest, entry(index, OPENAI_TTL))
    return list(left.values())
