"""Normalized token usage and its cost.

Every provider reports caching differently; the providers convert their reports to ``Usage`` so the
store, ``herald insights`` and the compressor see one shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.models import ModelInfo


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0  # uncached input (neither read from nor written to the cache)
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    @property
    def prompt_tokens(self) -> int:
        """Everything the provider read as input: the number compression thresholds compare against."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_5m_tokens=self.cache_write_5m_tokens + other.cache_write_5m_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )


BATCH_PRICE = 0.5  # of the normal price, for a request sent through a batch API (Anthropic's, OpenAI's)


def hit_ratio(usage: Usage) -> float:
    """Share of input tokens served from cache (0.0 when there was no input)."""
    total = usage.prompt_tokens
    return usage.cache_read_tokens / total if total else 0.0


def cost(usage: Usage, model: ModelInfo) -> float:
    """Estimated USD cost of ``usage`` at ``model``'s prices."""
    return (
        usage.input_tokens * model.input
        + usage.output_tokens * model.output
        + usage.cache_read_tokens * model.cache_read
        + usage.cache_write_5m_tokens * model.cache_write_5m
        + usage.cache_write_1h_tokens * model.cache_write_1h
    ) / 1_000_000


def uncached_cost(usage: Usage, model: ModelInfo) -> float:
    """What the same request would have cost with no caching at all."""
    return (usage.prompt_tokens * model.input + usage.output_tokens * model.output) / 1_000_000


# Requests that carry a session's own conversation (a chat's turn, a scheduled job's run): their
# prompt size is the session's size, and their timing is the session's pace (cache TTL choice).
# Side requests (summaries, ...) are neither.
CONVERSATION_PURPOSES = ("turn", "cron")


@dataclass(frozen=True)
class RequestUsage:
    """One provider request as the store records it."""

    purpose: str  # "turn", "summary", "cron", ...
    provider: str
    model: str
    usage: Usage
    cost: float
    uncached_cost: float
    characters: int = 0  # text spoken (a speech request is billed per character, not per token)
    batch: bool = False  # sent through the provider's batch API, priced at BATCH_PRICE


SPEECH_PURPOSE = "speech"  # a spoken reply's synthesis (agent.media.speech)
TRANSCRIPTION_PURPOSE = "transcription"  # a voice note or audio file heard (agent.media.transcribe)
SEARCH_PURPOSE = "search"  # a web_search query (agent.tools.web.search)


def service_usage(
    purpose: str, provider: str, model: str, cost: float, *, characters: int = 0
) -> RequestUsage:
    """A paid service's request (``agent.paid``) as the store records it: no tokens, a cost caching
    cannot lower, and for speech the characters spoken."""
    return RequestUsage(purpose, provider, model, Usage(), cost, cost, characters)


def priced(
    purpose: str, provider: str, model: str, info: ModelInfo, usage: Usage, *, batch: bool = False
) -> RequestUsage:
    """A request as the store records it, at ``info``'s prices; a ``batch`` request at :data:`BATCH_PRICE`
    of them (its cache reads and writes too: the providers halve every token of a batch)."""
    share = BATCH_PRICE if batch else 1.0
    return RequestUsage(
        purpose,
        provider,
        model,
        usage,
        cost(usage, info) * share,
        uncached_cost(usage, info) * share,
        batch=batch,
    )
