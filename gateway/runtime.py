"""Composition: config + home → store, provider, tools and agent, ready to run turns."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.compression.engine import CompressionSettings, ContextCompressor, ContextEngine
from agent.compression.summary import Summarizer, SummaryModel
from agent.loop import Agent, AgentSettings
from agent.memory import MemoryStore
from agent.providers.base import Provider
from agent.providers.retry import RetryPolicy
from agent.session import PromptSources, SessionSpec, StartedSession, start_session
from agent.store import SessionStore
from agent.tools.builtin import builtin_registry
from agent.tools.registry import ToolRegistry
from gateway.config import ConfigError, HeraldConfig
from gateway.home import HeraldHome

KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def make_provider(
    config: HeraldConfig,
    *,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
) -> Provider:
    """Build the provider client; a missing API key is a configuration error that says where to put it.

    ``model.base_url`` and ``model.api_key_env`` describe the configured provider: another provider
    (``--provider``, an auxiliary model) gets its SDK defaults (``OPENAI_BASE_URL`` ...) instead.
    """
    kind = provider or config.model.provider
    name = model or config.model.name
    configured = kind == config.model.provider
    key_variable = (config.model.api_key_env if configured else None) or KEY_VARIABLES[kind]
    api_key = os.environ.get(key_variable)
    if not api_key:
        raise ConfigError(
            f"No API key for {kind}: set {key_variable} in the environment or in .env in your Herald home "
            "(see `herald setup`)."
        )
    url = base_url if base_url is not None else (config.model.base_url if configured else None)
    # Imported here: each SDK takes about a second to import, and only the chosen one is needed.
    if kind == "anthropic":
        from agent.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(model=name, api_key=api_key, base_url=url, timeout=config.model.timeout)
    from agent.providers.openai_provider import OpenAIProvider

    return OpenAIProvider(model=name, api_key=api_key, base_url=url, timeout=config.model.timeout)


@dataclass
class Runtime:
    config: HeraldConfig
    home: HeraldHome
    store: SessionStore
    registry: ToolRegistry
    memory: MemoryStore
    provider: Provider
    agent: Agent
    cwd: Path

    def prompt_sources(self) -> PromptSources:
        return PromptSources(
            soul_path=self.home.soul_path,
            skills_dir=self.home.skills_dir,
            memory=self.memory,
            cwd=self.cwd,
            system_message=self.config.agent.system_message,
            toolsets=tuple(self.config.agent.toolsets),
            project_context=self.config.agent.project_context,
        )

    async def new_session(self, spec: SessionSpec) -> StartedSession:
        return await start_session(
            self.store,
            self.registry,
            self.prompt_sources(),
            spec,
            provider=self.provider.name,
            model=self.provider.model,
        )


def make_auxiliary_provider(config: HeraldConfig, main: Provider) -> Provider | None:
    """The summary model from ``auxiliary.compression``; None when it is the main model."""
    aux = config.auxiliary.compression
    provider = aux.provider or config.model.provider
    model = aux.model or main.model
    if provider == config.model.provider and model == main.model and aux.base_url is None:
        return None
    return make_provider(config, provider=provider, model=model, base_url=aux.base_url)


def make_context_engine(
    config: HeraldConfig, store: SessionStore, main: Provider, auxiliary: Provider | None
) -> ContextEngine:
    """The engine named by ``context.engine`` (only ``compressor`` exists so far)."""
    summarizer = Summarizer(
        store=store,
        main=SummaryModel(main, config.model_info(main.model)),
        auxiliary=SummaryModel(auxiliary, config.model_info(auxiliary.model)) if auxiliary else None,
        timeout=config.model.timeout,
        cache_policy=config.prompt_caching.policy,
        cache_ttl=config.prompt_caching.cache_ttl,
    )
    section = config.compression
    return ContextCompressor(
        store=store,
        summarizer=summarizer,
        settings=CompressionSettings(
            enabled=section.enabled,
            threshold=section.threshold,
            target_ratio=section.target_ratio,
            protect_last_n=section.protect_last_n,
            hygiene_threshold=section.hygiene_threshold,
        ),
        context_length=config.model_info(main.model).context_length,
        max_output_tokens=config.model.max_tokens,
    )


@asynccontextmanager
async def open_runtime(
    config: HeraldConfig,
    home: HeraldHome,
    *,
    provider: str | None = None,
    model: str | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[Runtime]:
    chosen = make_provider(config, provider=provider, model=model)
    auxiliary = make_auxiliary_provider(config, chosen)
    store = await SessionStore.open(home.db_path)
    memory = MemoryStore(home.memories_dir, config.memory.memory_char_limit, config.memory.user_char_limit)
    registry = builtin_registry()
    agent = Agent(
        store=store,
        provider=chosen,
        registry=registry,
        memory=memory,
        skills_dir=home.skills_dir,
        model_info=config.model_info(chosen.model),
        settings=AgentSettings(
            max_tokens=config.model.max_tokens,
            max_iterations=config.agent.max_iterations,
            cache_policy=config.prompt_caching.policy,
            cache_ttl=config.prompt_caching.cache_ttl,
            retry=RetryPolicy(max_retries=config.model.max_retries, base_delay=config.model.retry_base_delay),
        ),
        context_engine=make_context_engine(config, store, chosen, auxiliary),
    )
    try:
        yield Runtime(config, home, store, registry, memory, chosen, agent, cwd or Path.cwd())
    finally:
        await chosen.close()
        if auxiliary is not None:
            await auxiliary.close()
        await store.close()
