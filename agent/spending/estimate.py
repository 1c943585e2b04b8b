"""What a request can cost, before it is sent: the reservation the spend gate holds for it.

The input is sized from the request itself (about four characters a token), with a margin
(:data:`INPUT_MARGIN`) for what a provider counts beyond the text (message framing, tool schemas as it
encodes them). What the session's previous request sent, when that is still in the cache (sent within the
TTL, and long enough to be cached at all: the model's minimum), is priced as a cache read; the rest as a
cache write at the request's TTL (what a new tail costs; for providers without write prices that is the
input price). A request shorter than the model's minimum cacheable prefix is priced as plain input.

The answer is priced at the request's ``max_tokens``: the most the provider can bill for it. So a
reservation is what the request can cost, and the gate, rather than refuse the last cents of a budget
for an answer that is usually far shorter than its cap, lowers ``max_tokens`` to what is left
(:meth:`Price.tokens_for`), down to :data:`MIN_ANSWER_TOKENS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.model.provider import ProviderRequest, estimate_input_tokens
from agent.models import ModelInfo
from agent.usage import BATCH_PRICE

INPUT_MARGIN = 1.25  # the provider's count of a request over ours: the emulator's wire count is within it
MIN_ANSWER_TOKENS = 256  # a request whose scopes cannot pay this much of an answer is refused


@dataclass(frozen=True)
class Price:
    """A request's price before it is sent: ``input`` USD for what it sends, ``per_token`` USD for each
    token of its answer, up to ``max_tokens``."""

    input: float
    per_token: float
    max_tokens: int

    @property
    def most(self) -> float:
        """What the request can cost: its input and a whole ``max_tokens`` answer."""
        return self.input + self.max_tokens * self.per_token

    @property
    def least(self) -> float:
        """What it costs with the smallest answer worth asking for."""
        return self.input + min(self.max_tokens, MIN_ANSWER_TOKENS) * self.per_token

    def tokens_for(self, usd: float) -> int:
        """The largest ``max_tokens`` (at most the request's) whose cost fits in ``usd``."""
        if self.per_token <= 0:
            return self.max_tokens
        return max(0, min(self.max_tokens, math.floor((usd - self.input) / self.per_token + 1e-9)))


def request_price(
    request: ProviderRequest, model: ModelInfo, *, cached_tokens: int, batch: bool = False
) -> Price:
    """What ``request`` can cost at ``model``'s prices; ``cached_tokens``: the size of the session's
    previous request if it was sent within the cache's TTL (0 when not, or not known). A ``batch`` request
    costs :data:`~agent.usage.BATCH_PRICE` of that."""
    share = BATCH_PRICE if batch else 1.0
    size = math.ceil(estimate_input_tokens(request) * INPUT_MARGIN)
    per_token = model.output / 1_000_000 * share
    if size < model.min_cache_tokens:  # nothing of it is cached, nothing written
        return Price(size * model.input / 1_000_000 * share, per_token, request.max_tokens)
    read = min(cached_tokens, size) if cached_tokens >= model.min_cache_tokens else 0
    write_price = model.cache_write_1h if request.tail_ttl == "1h" else model.cache_write_5m
    input_cost = (read * model.cache_read + (size - read) * write_price) / 1_000_000
    return Price(input_cost * share, per_token, request.max_tokens)
