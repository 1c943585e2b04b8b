"""What a request will cost, before it is sent.

The input is sized from the request itself (about four characters a token). What the session's
previous request sent, when that is still in the cache (sent within the TTL, and long enough to be
cached at all: the model's minimum), is priced as a cache read; the rest as a cache write at the
request's TTL (what a new tail costs; for providers without write prices that is the input price). A
request shorter than the model's minimum cacheable prefix is priced as plain input.

The answer is priced at ``max_tokens``, capped at :data:`ASSUMED_OUTPUT_TOKENS`: most answers are far
shorter than their cap, and a reservation at the cap would refuse the last dollar of a budget for
nothing. An estimate is an estimate: the provider's report is what is counted afterwards.
"""

from __future__ import annotations

from agent.models import ModelInfo
from agent.providers.base import ProviderRequest, estimate_input_tokens

ASSUMED_OUTPUT_TOKENS = 1000


def estimate_cost(request: ProviderRequest, model: ModelInfo, *, cached_tokens: int) -> float:
    """USD ``request`` is expected to cost at ``model``'s prices; ``cached_tokens``: the size of the
    session's previous request if it was sent within the cache's TTL (0 when not, or not known)."""
    size = estimate_input_tokens(request)
    output = min(request.max_tokens, ASSUMED_OUTPUT_TOKENS) * model.output
    if size < model.min_cache_tokens:  # nothing of it is cached, nothing written
        return (size * model.input + output) / 1_000_000
    read = min(cached_tokens, size) if cached_tokens >= model.min_cache_tokens else 0
    write_price = model.cache_write_1h if request.tail_ttl == "1h" else model.cache_write_5m
    return (read * model.cache_read + (size - read) * write_price + output) / 1_000_000
