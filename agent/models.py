"""Built-in model table: context windows, minimum cacheable prefix and prices.

Prices are USD per million tokens as published by the providers in 2026. Any entry can be overridden
or added in ``config.yaml`` under ``models:``; unknown models get conservative defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelInfo:
    context_length: int
    min_cache_tokens: int
    input: float  # USD per Mtok, uncached input
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float
    vision: bool = False  # takes images
    pdf: bool = False  # takes PDFs as native document blocks (others get the extracted text)


def _anthropic(context: int, min_cache: int, input_price: float, output_price: float) -> ModelInfo:
    return ModelInfo(
        context_length=context,
        min_cache_tokens=min_cache,
        input=input_price,
        output=output_price,
        cache_write_5m=input_price * 1.25,
        cache_write_1h=input_price * 2.0,
        cache_read=input_price * 0.1,
        vision=True,
        pdf=True,
    )


def _openai(
    context: int, input_price: float, output_price: float, cached: float, *, vision: bool = True
) -> ModelInfo:
    return ModelInfo(
        context_length=context,
        min_cache_tokens=1024,
        input=input_price,
        output=output_price,
        cache_write_5m=input_price,
        cache_write_1h=input_price,
        cache_read=cached,
        vision=vision,
    )


# Longest prefix wins, so dated names ("claude-sonnet-4-5-20250929") resolve to their family.
BUILTIN_MODELS: dict[str, ModelInfo] = {
    "claude-opus-4-7": _anthropic(200_000, 4096, 5.0, 25.0),
    "claude-opus-4-6": _anthropic(200_000, 4096, 5.0, 25.0),
    "claude-opus-4-5": _anthropic(200_000, 4096, 5.0, 25.0),
    "claude-opus-4-1": _anthropic(200_000, 1024, 15.0, 75.0),
    "claude-opus-4": _anthropic(200_000, 1024, 15.0, 75.0),
    "claude-sonnet-4-6": _anthropic(200_000, 2048, 3.0, 15.0),
    "claude-sonnet-4-5": _anthropic(200_000, 1024, 3.0, 15.0),
    "claude-sonnet-4": _anthropic(200_000, 1024, 3.0, 15.0),
    "claude-haiku-4-5": _anthropic(200_000, 4096, 1.0, 5.0),
    "claude-3-5-haiku": _anthropic(200_000, 2048, 0.8, 4.0),
    "anthropic/claude-sonnet-4": _anthropic(200_000, 1024, 3.0, 15.0),
    "anthropic/claude-opus-4": _anthropic(200_000, 4096, 5.0, 25.0),
    "gpt-5": _openai(400_000, 1.25, 10.0, 0.125),
    "gpt-5-mini": _openai(400_000, 0.25, 2.0, 0.025),
    "gpt-4.1": _openai(1_047_576, 2.0, 8.0, 0.5),
    "gpt-4o": _openai(128_000, 2.5, 10.0, 1.25),
    "deepseek-chat": _openai(128_000, 0.28, 0.42, 0.028, vision=False),
    "deepseek-reasoner": _openai(128_000, 0.28, 0.42, 0.028, vision=False),
}

DEFAULT_MODEL = ModelInfo(
    context_length=128_000,
    min_cache_tokens=1024,
    input=3.0,
    output=15.0,
    cache_write_5m=3.75,
    cache_write_1h=6.0,
    cache_read=0.3,
)


# A Claude model the table does not know yet (a newer release) sees images and reads PDFs like every
# Claude model; any other unknown model is assumed to take text only until `models:` says otherwise.
UNKNOWN_CLAUDE = replace(DEFAULT_MODEL, vision=True, pdf=True)


def lookup_model(name: str, overrides: dict[str, ModelInfo] | None = None) -> ModelInfo:
    """Return the table entry for ``name``: exact override, else longest matching built-in prefix."""
    table = {**BUILTIN_MODELS, **(overrides or {})}
    if name in table:
        return table[name]
    matches = [key for key in table if name.startswith(key)]
    if not matches:
        return UNKNOWN_CLAUDE if "claude" in name.lower() else DEFAULT_MODEL
    return table[max(matches, key=len)]


def with_context_length(info: ModelInfo, context_length: int | None) -> ModelInfo:
    return info if context_length is None else replace(info, context_length=context_length)


_COMPLETION_TOKENS_MODELS = ("gpt-5", "o1", "o3", "o4")


def max_tokens_field(model: str) -> str:
    """The name of the output-token limit for ``model``: OpenAI's reasoning models refuse ``max_tokens``."""
    return "max_completion_tokens" if model.startswith(_COMPLETION_TOKENS_MODELS) else "max_tokens"
