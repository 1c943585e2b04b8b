"""What the console reads from spend limits and cache-miss reports: two small interfaces.

The console shows budgets (every scope with what it spent and its limit, and each chat's share of its
tightest limit) and cache misses (per chat, per turn with their cause, and in sum). It reads them only
through :class:`BudgetSource` and :class:`CacheMissSource`, so the pages do not depend on how limits are
configured or misses detected. :data:`NO_BUDGETS` and :data:`NO_CACHE_MISSES` are what a bot without
either has: the Budgets page says no budget is configured, and no miss is marked or counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class BudgetLine:
    """One scope's limit in one window, and what it spent in the current one."""

    scope: str  # "bot", "chat telegram:group:-100123", "person telegram:42", "job abc123"
    window: str  # "day", "month", "run"
    spent_usd: float
    limit_usd: float
    resets_at: float | None  # when the window starts again (None: per run)

    @property
    def used(self) -> float:
        """Share of the limit spent (1.0 = at the limit)."""
        return self.spent_usd / self.limit_usd if self.limit_usd > 0 else 1.0


class BudgetSource(Protocol):
    async def lines(self) -> list[BudgetLine]:
        """Every configured scope and window with its spend, the fullest first."""
        ...

    async def used_by_chat(self, session_keys: Sequence[str]) -> Mapping[str, float]:
        """For each chat that has a limit, the share of its tightest limit spent (1.0 = at the limit)."""
        ...


@dataclass(frozen=True)
class CacheMiss:
    """A request that read less from the cache than it could have, and why."""

    request_id: int  # the ``requests`` row it happened on
    at: float
    cause: str  # "ttl", "model", "prefix", "compression", "history", "evicted"
    tokens: int  # prompt tokens that should have been read from the cache
    usd: float  # what it cost over a hit


@dataclass(frozen=True)
class CacheMissSummary:
    events: int
    tokens: int
    usd: float
    by_cause: Mapping[str, int]  # events per cause
    expected_read: int  # tokens the cache could have served: the efficiency's denominator


class CacheMissSource(Protocol):
    @property
    def measured(self) -> bool:
        """Whether misses are detected at all (else the pages show no miss figures, not zeros)."""
        ...

    async def summary(self, since: float) -> CacheMissSummary | None:
        """Misses since ``since`` over all chats (None: nothing is measured)."""
        ...

    async def counts(self, session_keys: Sequence[str]) -> Mapping[str, int]:
        """Misses per chat, for the chats given (a chat without any is left out)."""
        ...

    async def of_chat(self, session_key: str, request_ids: Sequence[int]) -> list[CacheMiss]:
        """The chat's misses on the requests given (those its chart shows)."""
        ...


class NoBudgets:
    """No spend limit is configured."""

    async def lines(self) -> list[BudgetLine]:
        return []

    async def used_by_chat(self, session_keys: Sequence[str]) -> Mapping[str, float]:
        return {}


class NoCacheMisses:
    """No cache-miss report is kept."""

    @property
    def measured(self) -> bool:
        return False

    async def summary(self, since: float) -> CacheMissSummary | None:
        return None

    async def counts(self, session_keys: Sequence[str]) -> Mapping[str, int]:
        return {}

    async def of_chat(self, session_key: str, request_ids: Sequence[int]) -> list[CacheMiss]:
        return []


NO_BUDGETS: BudgetSource = NoBudgets()
NO_CACHE_MISSES: CacheMissSource = NoCacheMisses()
