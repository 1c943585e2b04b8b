"""The agent's runtime: config + home → database, store, locks, providers, tools and agent, ready to run
turns (the providers' clients from ``gateway.wiring.providers``).

The gateway's tables are migrated here too (not only by ``herald gateway run``): the ``cron`` tool
works in the terminal as well, writing jobs the gateway's scheduler picks up.

Everything with a lifecycle is opened in one ``AsyncExitStack``, so a failure half-way through start-up
closes what was already opened, and shutdown closes in reverse order (MCP servers first, locks before
the database and the Redis they live in, provider clients last of all). With ``cluster.redis_url`` the
runtime opens the cluster's Redis (``runtime.cluster``, shared by every part of the cluster) and the
session locks are fenced Redis leases (``gateway.cluster.leases.session_locks``); without it nothing of Redis
is imported. MCP servers start together, each within its ``connect_timeout``; one that does not start
is logged and left out (``agent.mcp.servers``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.api import (
    MAX_RETRY_AFTER,
    Agent,
    AgentSettings,
    BatchRoad,
    BrowserTools,
    CacheWatch,
    ContextCompressor,
    ContextEngine,
    DatabaseSessionLocks,
    DownloadPlace,
    Hands,
    LocalCounters,
    LocalRequestLimiter,
    ModelCalls,
    PromptSources,
    ProviderError,
    ProviderKey,
    ProviderPool,
    RequestLimiter,
    RetryPolicy,
    SessionLeases,
    SessionLocks,
    SessionSpec,
    SessionStore,
    SpendCounters,
    SpendGate,
    StartedSession,
    Summarizer,
    Synthesizer,
    Thresholds,
    ToolRegistry,
    Transcriber,
    WebTools,
    WorkspaceDownloads,
    WorkspaceUnusable,
    builtin_registry,
    hands_wanted,
    start_session,
)
from agent.db import Storage
from agent.memory import MemoryBank
from agent.skills import SkillLibrary
from gateway.budgets.limits import default_charge
from gateway.config import CLUSTER_NEEDS_POSTGRESQL, ConfigError, HeraldConfig
from gateway.cron.jobs import CronJobs
from gateway.cron.manage import CronManager, JobLimits
from gateway.cron.tool import cron_tool
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage, storage_url
from gateway.home.memory_skills import memory_and_skills
from gateway.rights import mcp_settings, session_toolsets
from gateway.speech.synthesizers import make_synthesizer
from gateway.speech.transcribers import make_transcriber
from gateway.timezones import resolve_timezone
from gateway.wiring.providers import auxiliary_key, make_failover, provider_factory

if TYPE_CHECKING:
    from agent.mcp import McpServers
    from gateway.cluster.redis import Cluster

@dataclass
class Runtime:
    """The agent and what it runs on. ``provider`` / ``model`` are what *new* sessions are built for."""

    config: HeraldConfig
    home: HeraldHome
    storage: Storage
    store: SessionStore
    locks: SessionLocks
    limiter: RequestLimiter
    pool: ProviderPool
    registry: ToolRegistry
    memory: MemoryBank  # files in the home on SQLite, the database on PostgreSQL (gateway.home.memory_skills)
    skills: SkillLibrary  # likewise
    agent: Agent
    context_dir: Path | None
    provider: str
    model: str
    cron: CronManager  # scheduled jobs: the table and who may change what (gateway.cron)
    transcriber: Transcriber | None  # voice notes to text; None when stt.provider is not set
    synthesizer: Synthesizer | None  # spoken replies; None when tts.provider is not set (or mode off)
    mcp: McpServers | None  # the MCP servers that started (None: none configured); tools in ``registry``
    cache_watch: CacheWatch  # judges every model request's cache read; the gateway counts its misses
    spending: SpendGate  # every model request passes it (agent.model_calls); budgets: from the config
    cluster: Cluster | None = None  # this process's part in a cluster (cluster.redis_url); None: one process
    hands: Hands | None = None  # the terminal and files tools (None: agent.toolsets names neither)

    def prompt_sources(self, spec: SessionSpec) -> PromptSources:
        return PromptSources(
            soul_path=self.home.soul_path,
            skills=self.skills,
            memory=self.memory,
            context_dir=self.context_dir,
            system_message=self.config.agent.system_message,
            toolsets=tuple(
                toolset
                for toolset in session_toolsets(self.config, spec.memory_scope)
                if toolset not in spec.toolsets_left_out
            ),
            project_context=self.config.agent.project_context,
        )

    async def new_session(
        self, spec: SessionSpec, *, provider: str | None = None, model: str | None = None
    ) -> StartedSession:
        """Build and store a new session's prompt, for ``provider``/``model`` or the runtime's default."""
        return await start_session(
            self.store,
            self.registry,
            self.prompt_sources(spec),
            spec,
            provider=provider or self.provider,
            model=model or self.model,
        )


def make_context_engine(
    config: HeraldConfig, store: SessionStore, pool: ProviderPool, calls: ModelCalls
) -> ContextEngine:
    """The engine named by ``context.engine`` (only ``compressor`` exists so far)."""
    summarizer = Summarizer(
        calls=calls,
        pool=pool,
        model_info=config.model_info,
        auxiliary=auxiliary_key(config),
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


def request_limiter(config: HeraldConfig, cluster: Cluster | None) -> RequestLimiter:
    """This process's cap on model requests in flight, and the cluster's on top when one is set."""
    local = LocalRequestLimiter(config.agent.max_concurrent_requests)
    if cluster is None:
        return local
    from gateway.cluster.limits.requests import cluster_request_limiter  # redis-py: cluster mode only

    return cluster_request_limiter(cluster, local)


def hold_ttl(config: HeraldConfig) -> float:
    """How long a spend reservation lives at most: one attempt's (each is reserved on its own) and its wait
    for a request slot; kept as long as a whole request's attempts and waits, to be safe."""
    model = config.model
    return model.timeout * (model.max_retries + 1) + model.max_retries * MAX_RETRY_AFTER + 60.0


def spend_counters(config: HeraldConfig, store: SessionStore, cluster: Cluster | None) -> SpendCounters:
    """Where the spend gate keeps its figures: this process's memory, or the cluster's Redis (shared by
    every process, so together they hold the same bound as one process: a limit is never passed)."""
    if cluster is None:
        return LocalCounters(store.spending.spent, hold_ttl=hold_ttl(config))
    from gateway.cluster.limits.spending import RedisCounters  # redis-py: cluster mode only

    return RedisCounters(cluster.redis, store.spending.spent, hold_ttl=hold_ttl(config))


def agent_settings(config: HeraldConfig) -> AgentSettings:
    return AgentSettings(
        max_tokens=config.model.max_tokens,
        max_iterations=config.agent.max_iterations,
        cache_policy=config.prompt_caching.policy,
        cache_ttl=config.prompt_caching.cache_ttl,
        retry=RetryPolicy(max_retries=config.model.max_retries, base_delay=config.model.retry_base_delay),
        on_max_tokens=config.agent.on_max_tokens,
        delegate=config.delegate,
    )


@asynccontextmanager
async def open_agent_runtime(
    config: HeraldConfig,
    home: HeraldHome,
    *,
    provider: str | None = None,
    model: str | None = None,
    context_dir: Path | None = None,
) -> AsyncIterator[Runtime]:
    """Open everything; ``provider``/``model`` override the configured model for new sessions.

    ``context_dir`` is where the project context file is looked up when ``agent.context_dir`` is not
    configured (the terminal passes its working directory; a daemon passes nothing).
    """
    kind = provider or config.model.provider
    name = model or config.model.name
    async with AsyncExitStack() as stack:
        require_shared_storage(config, home)  # before a SQLite file is created for nothing
        storage = await stack.enter_async_context(open_home_storage(home, config))
        store = SessionStore(storage)
        cluster = await stack.enter_async_context(open_cluster(config, home))
        locks = session_locks(storage, cluster)
        stack.push_async_callback(locks.aclose)
        pool = await stack.enter_async_context(ProviderPool(provider_factory(config)))
        try:
            pool.get(ProviderKey(kind, name))  # fail at start-up, not at the first message
        except ProviderError as error:
            raise ConfigError(str(error)) from None
        transcriber = make_transcriber(config)
        if transcriber is not None:
            stack.push_async_callback(transcriber.aclose)
        synthesizer = make_synthesizer(config, os.environ)
        if synthesizer is not None:
            stack.push_async_callback(synthesizer.aclose)
        limiter = request_limiter(config, cluster)
        kept = memory_and_skills(config, home, storage)  # files on SQLite, tables on PostgreSQL
        zone = resolve_timezone(config.scheduler.timezone)
        cron = CronManager(CronJobs(storage), zone, JobLimits.of(config.scheduler))
        spending = SpendGate(
            spend_counters(config, store, cluster),
            store.spending,
            zone=zone,
            warn_at=config.budgets.warn_at,
            default=default_charge(config.budgets),
        )
        stack.push_async_callback(spending.aclose)
        watch = cache_watch(config, store)
        # The road to the model keeps the agent's time (a test or a benchmark may move the agent's clock).
        calls = ModelCalls(
            store=store,
            limiter=limiter,
            gate=spending,
            model_info=config.model_info,
            cache_watch=watch,
            failover=make_failover(config, pool),
            batches=BatchRoad(store.batches, clock=lambda: agent.clock()),
            clock=lambda: agent.clock(),
        )
        stack.push_async_callback(calls.aclose)  # probes of a failing model in flight
        web = WebTools(config.web, os.environ)  # web_search only when its provider is usable
        stack.push_async_callback(web.aclose)
        registry = builtin_registry().with_tools(cron_tool(cron), *web.tools)
        hands = open_hands(config, home)
        if "browser" in config.agent.toolsets:  # Chromium itself starts at a session's first browser call
            browser = BrowserTools(config.web, downloads=download_place(config, hands))
            stack.push_async_callback(browser.aclose)
            registry = registry.with_tools(*browser.tools)
        if hands is not None:
            stack.push_async_callback(hands.aclose)  # stops the background commands it started
            registry = registry.with_tools(*hands.tools())
            if (withheld := hands.withheld()) is not None:
                registry = registry.with_source(withheld)
        mcp: McpServers | None = None
        if mcp_settings(config).servers:
            from agent.mcp import McpServers  # the MCP SDK is large: only for configured servers

            mcp = await stack.enter_async_context(McpServers.open(mcp_settings(config), os.environ))
            registry = registry.with_source(mcp)
        agent = Agent(
            store=store,
            pool=pool,
            registry=registry,
            memory=kept.memory,
            skills=kept.skills,
            model_info=config.model_info,
            settings=agent_settings(config),
            calls=calls,
            context_engine=make_context_engine(config, store, pool, calls),
        )
        yield Runtime(
            config=config,
            home=home,
            storage=storage,
            store=store,
            locks=locks,
            limiter=limiter,
            pool=pool,
            registry=registry,
            memory=kept.memory,
            skills=kept.skills,
            agent=agent,
            context_dir=config.agent.context_dir or context_dir,
            provider=kind,
            model=name,
            cron=cron,
            transcriber=transcriber,
            synthesizer=synthesizer,
            mcp=mcp,
            cache_watch=watch,
            spending=spending,
            cluster=cluster,
            hands=hands,
        )


def open_hands(config: HeraldConfig, home: HeraldHome) -> Hands | None:
    """The owner's shell and file tools when ``agent.toolsets`` names them (the workspace is created)."""
    if not hands_wanted(config.agent.toolsets):
        return None
    try:
        return Hands.build(config.tools, herald_home=home.root, environ=os.environ)
    except WorkspaceUnusable as error:
        raise ConfigError(str(error)) from None


def download_place(config: HeraldConfig, hands: Hands | None) -> DownloadPlace | None:
    """Where the owner's browser downloads go: the hands' workspace; None (downloads refused) without it."""
    if hands is None:
        return None
    return WorkspaceDownloads(
        hands.confinement,
        hands.files.pool,
        config.web.browser.max_download_mb * 1024 * 1024,
        config.tools.workspace_quota_mb,
    )


def cache_watch(config: HeraldConfig, store: SessionStore) -> CacheWatch:
    """The cache-miss check of every model request (``agent.cache_misses``), on the store's database."""
    caching = config.prompt_caching
    thresholds = Thresholds(min_tokens=caching.miss_min_tokens, min_share=caching.miss_min_share)
    return CacheWatch(store.cache_misses, config.model_info, thresholds)


def require_shared_storage(config: HeraldConfig, home: HeraldHome) -> None:
    """A cluster needs PostgreSQL: checked again on ``storage.url`` resolved (``$NAME`` may name SQLite),
    with the sentence the config's own check gives."""
    if config.cluster.redis_url is not None and storage_url(config, home).dialect != "postgresql":
        raise ConfigError(CLUSTER_NEEDS_POSTGRESQL)


@asynccontextmanager
async def open_cluster(config: HeraldConfig, home: HeraldHome) -> AsyncIterator[Cluster | None]:
    """The cluster's Redis when ``cluster.redis_url`` is set (one sentence and exit 2 when it cannot be
    reached); None for one process, which imports nothing of Redis."""
    if config.cluster.redis_url is None:
        yield None
        return
    from gateway.cluster.redis import open_cluster as open_redis_cluster  # redis-py: cluster mode only

    async with open_redis_cluster(config, home) as cluster:
        yield cluster


def session_locks(storage: Storage, cluster: Cluster | None) -> SessionLocks:
    """Fenced Redis leases in a cluster; leases in the database otherwise (one machine, or several
    processes sharing one database)."""
    if cluster is None:
        return DatabaseSessionLocks(SessionLeases(storage))
    from gateway.cluster.leases.session_locks import RedisSessionLocks, lease_owner

    locks = RedisSessionLocks(
        cluster.redis,
        storage,
        owner=lease_owner(cluster.instance_id),
        lease_ttl=cluster.settings.lease_ttl,
    )
    cluster.watch.on_lost(locks.suspect)
    return locks
