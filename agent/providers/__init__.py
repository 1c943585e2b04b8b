"""Model providers: the Anthropic Messages API and OpenAI-compatible Chat Completions, behind one
:class:`~agent.model.provider.Provider` interface.

:func:`build_provider` is how a client is made: it imports the chosen SDK only then (each takes about a
second to import, and a process needs one at most).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.model.provider import Provider

PROVIDERS = ("anthropic", "openai")


def build_provider(
    provider: str, *, model: str, api_key: str, base_url: str | None, timeout: float
) -> Provider:
    """A client of ``provider`` (one of :data:`PROVIDERS`) for ``model``; ``base_url`` None = the SDK's."""
    if provider == "anthropic":
        from agent.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(model=model, api_key=api_key, base_url=base_url, timeout=timeout)
    if provider == "openai":
        from agent.providers.openai_provider import OpenAIProvider

        return OpenAIProvider(model=model, api_key=api_key, base_url=base_url, timeout=timeout)
    raise ValueError(f"unknown provider {provider!r}")
