"""Building the agent: its parts fitted together in one place, from what the gateway decides.

How the agent's parts fit is the agent's business: the provider pool and its failover, the road to the
model (the request cap, the spend gate, the cache-miss watch, batches, retries), the context engine and
its summarizer, the tool registry with the built-in tools, the web, the browser, the owner's hands and
the MCP servers. What they are built *from* is the gateway's (``gateway.wiring.runtime``): the
configuration file, the Herald home, the API keys, the cluster, the budgets, who may use which tools.

Contract of :func:`open_agent`:

- it takes :class:`AgentConfig` (the sections of ``agent.settings`` the agent reads: the gateway's
  config is one), the open :class:`~agent.db.base.Storage`, the memory and skills, :class:`Models`
  (the default model and how a client is built), :class:`Spending` (the budgets' zone, warning and
  default charge), the gateway's own tools (added after the built-in ones), the MCP servers the person
  may use, the Herald home and the environment, and :class:`Shared` (what a cluster shares; None: one
  process);
- it yields :class:`AgentParts`: the store, the session locks, the request cap, the pool, the spend gate,
  the cache watch, the hands, the MCP servers, the registry and the :class:`~agent.loop.Agent`;
- a configuration the agent cannot be built from (no key for the default model or a fallback, an
  unusable workspace) raises :class:`AssemblyError` with one sentence, before anything is yielded;
- everything with a lifecycle closes when the block exits, in reverse order of opening: MCP servers
  first, then the hands, the browser, the web clients, probes in flight, the spend gate, the provider
  clients, and the session locks last (before the caller's database and Redis).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agent.agent_settings import AgentSettings
from agent.batching.road import BatchRoad
from agent.cache_misses.diagnosis import Thresholds
from agent.cache_watch import CacheWatch
from agent.compression.engine import ContextCompressor, ContextEngine
from agent.compression.summary import Summarizer
from agent.db.base import Storage
from agent.failover import Failover
from agent.hands.downloads import WorkspaceDownloads
from agent.hands.toolbox import Hands, WorkspaceUnusable
from agent.hands.toolbox import wanted as hands_wanted
from agent.limits import LocalRequestLimiter, RequestLimiter
from agent.locks import DatabaseSessionLocks, SessionLocks
from agent.loop import Agent
from agent.memory import MemoryBank
from agent.model.provider import ProviderError
from agent.model_calls import ModelCalls
from agent.models import ModelInfo
from agent.providers.pool import ProviderFactory, ProviderKey, ProviderPool
from agent.providers.retry import MAX_RETRY_AFTER, RetryPolicy
from agent.settings import (
    AgentSection,
    AuxiliarySettings,
    CompressionSettings,
    DelegateSettings,
    McpSettings,
    ModelSettings,
    PromptCachingSettings,
    ToolsSettings,
    WebSettings,
)
from agent.skills import SkillLibrary
from agent.spending.charge import Charge
from agent.spending.counters import Loader, LocalCounters, SpendCounters
from agent.spending.gate import SpendGate
from agent.store import SessionStore
from agent.store.leases import SessionLeases
from agent.tools.browser import BrowserTools, DownloadPlace
from agent.tools.builtin import builtin_registry
from agent.tools.registry import Tool, ToolRegistry
from agent.tools.web import WebTools

if TYPE_CHECKING:
    from agent.mcp import McpServers


class AgentConfig(Protocol):
    """The configuration sections the agent reads (``agent.settings``), and its model table."""

    @property
    def model(self) -> ModelSettings: ...
    @property
    def prompt_caching(self) -> PromptCachingSettings: ...
    @property
    def compression(self) -> CompressionSettings: ...
    @property
    def auxiliary(self) -> AuxiliarySettings: ...
    @property
    def agent(self) -> AgentSection: ...
    @property
    def delegate(self) -> DelegateSettings: ...
    @property
    def web(self) -> WebSettings: ...
    @property
    def tools(self) -> ToolsSettings: ...
    def model_info(self, name: str | None = None) -> ModelInfo:
        """The table entry of ``name`` (default: the configured model) with the configured overrides."""
        ...


@dataclass(frozen=True)
class Models:
    """Which models the agent talks to, and how a client of one is built (keys and endpoints are the
    gateway's)."""

    default: ProviderKey  # new sessions' model: its client is built at once (a missing key fails the start)
    clients: ProviderFactory
    fallbacks: Sequence[ProviderKey] = ()  # in order; each built at once too
    auxiliary: ProviderKey | None = None  # the summary model; None = each session's own


@dataclass(frozen=True)
class Spending:
    """The budgets' part in the spend gate: the calendar's zone, when to warn, whom a request made outside
    any ``charging`` block is charged to."""

    zone: dt.tzinfo
    warn_at: float | None
    default: Charge


class Shared(Protocol):
    """What the processes of a cluster share (``gateway.cluster``); the agent uses it as it is given."""

    def session_locks(self, storage: Storage) -> SessionLocks:
        """One turn at a time per session over every process."""
        ...

    def request_limiter(self, local: LocalRequestLimiter) -> RequestLimiter:
        """``local`` with the cluster's cap on top (or ``local`` itself)."""
        ...

    def spend_counters(self, spent: Loader, *, hold_ttl: float) -> SpendCounters:
        """Spend figures shared by every process, so together they never pass a limit."""
        ...


class AssemblyError(Exception):
    """The agent cannot be built as configured: the message is one sentence for whoever configured it."""


@dataclass(frozen=True)
class AgentParts:
    """The built agent and the parts the gateway reads or hands on."""

    store: SessionStore
    locks: SessionLocks
    limiter: RequestLimiter
    pool: ProviderPool
    spending: SpendGate
    cache_watch: CacheWatch
    registry: ToolRegistry
    agent: Agent
    hands: Hands | None  # the terminal and files tools (None: agent.toolsets names neither)
    mcp: McpServers | None  # the MCP servers that started (None: none configured)


@asynccontextmanager
async def open_agent(
    config: AgentConfig,
    storage: Storage,
    *,
    memory: MemoryBank,
    skills: SkillLibrary,
    models: Models,
    spending: Spending,
    tools: Sequence[Tool] = (),
    mcp: McpSettings | None = None,
    home: Path,
    environ: Mapping[str, str],
    shared: Shared | None = None,
) -> AsyncIterator[AgentParts]:
    """Build the agent and its parts (the module docstring gives the contract)."""
    async with AsyncExitStack() as stack:
        store = SessionStore(storage)
        locks = session_locks(storage, shared)
        stack.push_async_callback(locks.aclose)
        pool = await stack.enter_async_context(ProviderPool(models.clients))
        try:
            pool.get(models.default)  # fail at start-up, not at the first message
        except ProviderError as error:
            raise AssemblyError(str(error)) from None
        limiter = request_limiter(config, shared)
        gate = SpendGate(
            spend_counters(config, store, shared),
            store.spending,
            zone=spending.zone,
            warn_at=spending.warn_at,
            default=spending.default,
        )
        stack.push_async_callback(gate.aclose)
        watch = cache_watch(config, store)
        # The road to the model keeps the agent's time (a test or a benchmark may move the agent's clock).
        calls = ModelCalls(
            store=store,
            limiter=limiter,
            gate=gate,
            model_info=config.model_info,
            cache_watch=watch,
            failover=failover(config, models.fallbacks, pool),
            batches=BatchRoad(store.batches, clock=lambda: agent.clock()),
            clock=lambda: agent.clock(),
        )
        stack.push_async_callback(calls.aclose)  # probes of a failing model in flight
        web = WebTools(config.web, environ)  # web_search only when its provider is usable
        stack.push_async_callback(web.aclose)
        registry = builtin_registry().with_tools(*tools, *web.tools)
        hands = open_hands(config, home, environ)
        if "browser" in config.agent.toolsets:  # Chromium itself starts at a session's first browser call
            browser = BrowserTools(config.web, downloads=download_place(config, hands))
            stack.push_async_callback(browser.aclose)
            registry = registry.with_tools(*browser.tools)
        if hands is not None:
            stack.push_async_callback(hands.aclose)  # stops the background commands it started
            registry = registry.with_tools(*hands.tools())
            if (withheld := hands.withheld()) is not None:
                registry = registry.with_source(withheld)
        servers: McpServers | None = None
        if mcp is not None and mcp.servers:
            from agent.mcp import McpServers  # the MCP SDK is large: only for configured servers

            servers = await stack.enter_async_context(McpServers.open(mcp, environ))
            registry = registry.with_source(servers)
        agent = Agent(
            store=store,
            pool=pool,
            registry=registry,
            memory=memory,
            skills=skills,
            model_info=config.model_info,
            settings=agent_settings(config),
            calls=calls,
            context_engine=context_engine(config, store, pool, calls, models.auxiliary),
        )
        yield AgentParts(
            store=store,
            locks=locks,
            limiter=limiter,
            pool=pool,
            spending=gate,
            cache_watch=watch,
            registry=registry,
            agent=agent,
            hands=hands,
            mcp=servers,
        )


def agent_settings(config: AgentConfig) -> AgentSettings:
    return AgentSettings(
        max_tokens=config.model.max_tokens,
        max_iterations=config.agent.max_iterations,
        cache_policy=config.prompt_caching.policy,
        cache_ttl=config.prompt_caching.cache_ttl,
        retry=RetryPolicy(max_retries=config.model.max_retries, base_delay=config.model.retry_base_delay),
        on_max_tokens=config.agent.on_max_tokens,
        delegate=config.delegate,
    )


def session_locks(storage: Storage, shared: Shared | None) -> SessionLocks:
    """Leases in the database (one machine, or several processes sharing one database), or the cluster's."""
    return DatabaseSessionLocks(SessionLeases(storage)) if shared is None else shared.session_locks(storage)


def request_limiter(config: AgentConfig, shared: Shared | None) -> RequestLimiter:
    """This process's cap on model requests in flight, and the cluster's on top when one is shared."""
    local = LocalRequestLimiter(config.agent.max_concurrent_requests)
    return local if shared is None else shared.request_limiter(local)


def hold_ttl(config: AgentConfig) -> float:
    """How long a spend reservation lives at most: one attempt's (each is reserved on its own) and its wait
    for a request slot; kept as long as a whole request's attempts and waits, to be safe."""
    model = config.model
    return model.timeout * (model.max_retries + 1) + model.max_retries * MAX_RETRY_AFTER + 60.0


def spend_counters(config: AgentConfig, store: SessionStore, shared: Shared | None) -> SpendCounters:
    """Where the spend gate keeps its figures: this process's memory, or what the cluster shares."""
    if shared is None:
        return LocalCounters(store.spending.spent, hold_ttl=hold_ttl(config))
    return shared.spend_counters(store.spending.spent, hold_ttl=hold_ttl(config))


def failover(config: AgentConfig, fallbacks: Sequence[ProviderKey], pool: ProviderPool) -> Failover | None:
    """The fallback models (None when there are none); each is built now, so a missing key stops the start
    with the sentence that says where to put it, not the first outage."""
    if not fallbacks:
        return None
    for key in fallbacks:
        try:
            pool.get(key)
        except ProviderError as error:
            raise AssemblyError(f"model.fallbacks: {error}") from None
    return Failover(list(fallbacks), pool.get, probe_interval=config.model.fallback_probe_interval)


def context_engine(
    config: AgentConfig,
    store: SessionStore,
    pool: ProviderPool,
    calls: ModelCalls,
    auxiliary: ProviderKey | None,
) -> ContextEngine:
    """The engine named by ``context.engine`` (only ``compressor`` exists so far)."""
    summarizer = Summarizer(
        calls=calls,
        pool=pool,
        model_info=config.model_info,
        auxiliary=auxiliary,
        timeout=config.model.timeout,
        cache_policy=config.prompt_caching.policy,
        cache_ttl=config.prompt_caching.cache_ttl,
    )
    return ContextCompressor(
        store=store,
        summarizer=summarizer,
        settings=config.compression,
        model_info=config.model_info,
        max_output_tokens=config.model.max_tokens,
    )


def cache_watch(config: AgentConfig, store: SessionStore) -> CacheWatch:
    """The cache-miss check of every model request (``agent.cache_misses``), on the store's database."""
    caching = config.prompt_caching
    thresholds = Thresholds(min_tokens=caching.miss_min_tokens, min_share=caching.miss_min_share)
    return CacheWatch(store.cache_misses, config.model_info, thresholds)


def open_hands(config: AgentConfig, home: Path, environ: Mapping[str, str]) -> Hands | None:
    """The owner's shell and file tools when ``agent.toolsets`` names them (the workspace is created)."""
    if not hands_wanted(config.agent.toolsets):
        return None
    try:
        return Hands.build(config.tools, herald_home=home, environ=environ)
    except WorkspaceUnusable as error:
        raise AssemblyError(str(error)) from None


def download_place(config: AgentConfig, hands: Hands | None) -> DownloadPlace | None:
    """Where the owner's browser downloads go: the hands' workspace; None (downloads refused) without it."""
    if hands is None:
        return None
    return WorkspaceDownloads(
        hands.confinement,
        hands.files.pool,
        config.web.browser.max_download_mb * 1024 * 1024,
        config.tools.workspace_quota_mb,
    )
