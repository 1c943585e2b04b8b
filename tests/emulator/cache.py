"""The providers' prefix caches as a pure model (no I/O, no wall clock).

Everything here follows shared/notes/providers.md: Anthropic reads at breakpoints with a 20-position
lookback and writes only at breakpoints; OpenAI caches automatically in 128-token steps from 1024
under a routing key. The oracle remembers every prefix ever sent, ignoring TTLs and markers, which is
what a perfect caching policy could have read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .blocks import OPENAI_MIN_PREFIX, Layout, PrefixLayout

LOOKBACK = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0, "24h": 86400.0}
DEFAULT_MIN_CACHE_TOKENS = 1024
DEFAULT_CONTEXT_WINDOW = 200_000

# Minimum cacheable prefix per model family, matched by longest prefix (dated names work).
MIN_CACHE_TOKENS: dict[str, int] = {
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-opus-4-7": 4096,
    "claude-haiku-4-5": 4096,
    "claude-3-haiku": 2048,
    "claude-3-5-haiku": 2048,
    "claude-sonnet-4-6": 2048,
    "claude-sonnet-4": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
}


class Clock:
    """Emulated time for TTLs: starts at 0 and moves only when told to."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the emulated clock only moves forward")
        with self._lock:
            self._now += seconds


def normalize_model(model: str) -> str:
    """'anthropic/claude-opus-4.5' -> 'claude-opus-4-5' so one table serves both APIs."""
    return model.removeprefix("anthropic/").replace(".", "-")


def lookup_by_prefix(table: dict[str, int], model: str) -> int | None:
    """The value of the longest key that ``model`` (or its normalized form) starts with."""
    best: tuple[int, int] | None = None
    for name in {model, normalize_model(model)}:
        for key, value in table.items():
            if name.startswith(key) and (best is None or len(key) > best[0]):
                best = (len(key), value)
    return None if best is None else best[1]


@dataclass(frozen=True)
class AnthropicUsage:
    """Cache accounting of one request, in Anthropic's terms."""

    total: int
    read: int
    write_5m: int
    write_1h: int

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h

    @property
    def uncached(self) -> int:
        return self.total - self.read - self.write


@dataclass
class _Entry:
    expires: float
    ttl: str


class AnthropicCache:
    """Entries keyed by prefix hash (the hash already includes the model)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def clear(self) -> None:
        self._entries.clear()

    def _alive(self, prefix_hash: str, now: float) -> _Entry | None:
        entry = self._entries.get(prefix_hash)
        if entry is not None and entry.expires <= now:
            del self._entries[prefix_hash]
            return None
        return entry

    def apply(self, layout: Layout, min_tokens: int, now: float) -> AnthropicUsage:
        """Read (longest hit over all breakpoints, 20-position lookback), then write breakpoints."""
        pos = layout.positions
        eligible = [i for i in layout.breakpoints if pos[i].cum_tokens >= min_tokens]
        read_idx = -1
        for bp in eligible:
            for j in range(bp, max(bp - LOOKBACK, 0) - 1, -1):
                if j <= read_idx:
                    break
                if self._alive(pos[j].prefix_hash, now) is not None:
                    read_idx = j
                    break
        read = 0
        if read_idx >= 0:
            hit = self._entries[pos[read_idx].prefix_hash]
            hit.expires = now + TTL_SECONDS[hit.ttl]
            read = pos[read_idx].cum_tokens
        # Writes come after the read: this request cannot read what it writes itself.
        written = [bp for bp in eligible if self._alive(pos[bp].prefix_hash, now) is None]
        write = {"5m": 0, "1h": 0}
        mark = read
        for bp in written:
            ttl = pos[bp].ttl or "5m"
            self._entries[pos[bp].prefix_hash] = _Entry(now + TTL_SECONDS[ttl], ttl)
            if pos[bp].cum_tokens > mark:
                write[ttl] += pos[bp].cum_tokens - mark
                mark = pos[bp].cum_tokens
        return AnthropicUsage(layout.total_tokens, read, write["5m"], write["1h"])


class OpenAICache:
    """Automatic prefix cache: entries keyed by (routing key, prefix hash at a 128-token boundary)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], float] = {}

    def clear(self) -> None:
        self._entries.clear()

    def apply(
        self,
        layout: PrefixLayout,
        cache_key: str | None,
        retention: str | None,
        now: float,
        min_tokens: int = OPENAI_MIN_PREFIX,
    ) -> int:
        """Cached tokens of this request; then every boundary is written (or refreshed)."""
        if layout.total_tokens < min_tokens:
            return 0
        route = (cache_key or "", layout.routing_hash)
        cached = 0
        for tokens, prefix_hash in layout.boundaries:
            expires = self._entries.get((*route, prefix_hash))
            if expires is not None and expires > now and tokens >= min_tokens:
                cached = tokens
        ttl = TTL_SECONDS["24h"] if retention == "24h" else TTL_SECONDS["5m"]
        for _, prefix_hash in layout.boundaries:
            key = (*route, prefix_hash)
            self._entries[key] = max(self._entries.get(key, 0.0), now + ttl)
        return cached


class Oracle:
    """Every prefix hash any successful request has sent, with its token count."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def best(self, prefixes: list[tuple[int, str]], min_tokens: int) -> int:
        """Longest already-sent prefix among ``prefixes`` (tokens, hash), 0 below ``min_tokens``."""
        best = max((t for t, h in prefixes if h in self._seen), default=0)
        return best if best >= min_tokens else 0

    def add(self, prefixes: list[tuple[int, str]]) -> None:
        self._seen.update(h for _, h in prefixes)


def layout_prefixes(layout: Layout) -> list[tuple[int, str]]:
    return [(p.cum_tokens, p.prefix_hash) for p in layout.positions]
