"""The model's clients from the config: which key each provider reads, where it is sent, the fallbacks.

The runtime's provider pool builds its clients here (:func:`provider_factory`); ``herald doctor`` asks the
same functions which key and endpoint a provider would use, so both say the same thing.
"""

from __future__ import annotations

import os

from agent.api import (
    Provider,
    ProviderError,
    ProviderFactory,
    ProviderKey,
    build_provider,
)
from gateway.config import ConfigError, HeraldConfig

KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def key_variable(config: HeraldConfig, provider: str) -> str:
    """The environment variable holding ``provider``'s API key.

    ``model.base_url`` and ``model.api_key_env`` describe the configured provider: another provider
    (``--provider``, an auxiliary model, an older session) gets its SDK defaults (``OPENAI_BASE_URL``
    ...) unless the key names an endpoint of its own.
    """
    configured = provider == config.model.provider
    return (config.model.api_key_env if configured else None) or KEY_VARIABLES[provider]


def configured_base_url(config: HeraldConfig, key: ProviderKey) -> str | None:
    """The endpoint of ``key``; None = the SDK default (which honours ANTHROPIC_BASE_URL ...)."""
    if key.base_url is not None:
        return key.base_url
    return config.model.base_url if key.provider == config.model.provider else None


def missing_key_error(provider: str, variable: str) -> ConfigError:
    return ConfigError(
        f"No API key for {provider}: set {variable} in the environment or in .env in your "
        "Herald home (see `herald setup`)."
    )


def make_provider(config: HeraldConfig, key: ProviderKey) -> Provider:
    """Build one provider client; a missing API key is a configuration error that says where to put it."""
    variable = key.api_key_env or key_variable(config, key.provider)
    api_key = os.environ.get(variable)
    if not api_key:
        raise missing_key_error(key.provider, variable)
    url = configured_base_url(config, key)
    timeout = config.model.timeout
    return build_provider(key.provider, model=key.model, api_key=api_key, base_url=url, timeout=timeout)


def provider_factory(config: HeraldConfig) -> ProviderFactory:
    """The pool's factory: configuration problems become a failed turn with one sentence, not a crash."""

    def factory(key: ProviderKey) -> Provider:
        if key.provider not in KEY_VARIABLES:
            raise ProviderError(f"unknown provider '{key.provider}'", retryable=False, kind="configuration")
        try:
            return make_provider(config, key)
        except ConfigError as error:
            raise ProviderError(str(error), retryable=False, kind="configuration") from None

    return factory


def fallback_keys(config: HeraldConfig) -> list[ProviderKey]:
    """The clients of ``model.fallbacks``, in order."""
    return [ProviderKey(f.provider, f.name, f.base_url, f.api_key_env) for f in config.model.fallbacks]


def auxiliary_key(config: HeraldConfig) -> ProviderKey | None:
    """The summary model from ``auxiliary.compression``; None = each session's own model."""
    aux = config.auxiliary.compression
    if aux.provider is None and aux.model is None and aux.base_url is None:
        return None
    provider = aux.provider or config.model.provider
    return ProviderKey(provider, aux.model or config.model.name, aux.base_url)
