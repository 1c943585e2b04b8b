"""The agent's runtime: config + home → database, cluster, memory and skills, the agent (built by
``agent.api.open_agent`` from the gateway's decisions), the cron manager and speech, ready to run turns.

What is the gateway's is decided here: which model and which keys (``gateway.wiring.providers``), the
budgets' zone and default charge, the ``cron`` tool, the MCP servers the owner's rights allow
(``gateway.rights``), the Herald home, and what a cluster shares (``gateway.cluster.shared``). How the
agent's parts fit (pool, failover, request cap, spend gate, cache watch, compression, tools, hands) is
the agent's (``agent.assembly``); a configuration it cannot be built from is a ``ConfigError``.

The gateway's tables are migrated here too (not only by ``herald gateway run``): the ``cron`` tool
works in the terminal as well, writing jobs the gateway's scheduler picks up.

Everything with a lifecycle is opened in one ``AsyncExitStack``, so a failure half-way through start-up
closes what was already opened, and shutdown closes in reverse order (speech clients, then the agent's
parts: MCP servers first, session locks last, before the database and the Redis they live in). With
``cluster.redis_url`` the runtime opens the cluster's Redis (``runtime.cluster``, shared by every part of
the cluster) and the session locks are fenced Redis leases (``gateway.cluster.leases.session_locks``);
without it nothing of Redis is imported. MCP servers start together, each within its ``connect_timeout``;
one that does not start is logged and left out (``agent.mcp.servers``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.api import (
    Agent,
    AssemblyError,
    CacheWatch,
    Hands,
    Models,
    PromptSources,
    ProviderKey,
    ProviderPool,
    RequestLimiter,
    SessionLocks,
    SessionSpec,
    SessionStore,
    SpendGate,
    Spending,
    StartedSession,
    Synthesizer,
    ToolRegistry,
    Transcriber,
    open_agent,
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
from gateway.wiring.providers import auxiliary_key, fallback_keys, provider_factory

if TYPE_CHECKING:
    from agent.api import Shared
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
        cluster = await stack.enter_async_context(open_cluster(config, home))
        kept = memory_and_skills(config, home, storage)  # files on SQLite, tables on PostgreSQL
        zone = resolve_timezone(config.scheduler.timezone)
        cron = CronManager(CronJobs(storage), zone, JobLimits.of(config.scheduler))
        try:
            parts = await stack.enter_async_context(
                open_agent(
                    config,
                    storage,
                    memory=kept.memory,
                    skills=kept.skills,
                    models=Models(
                        default=ProviderKey(kind, name),
                        clients=provider_factory(config),
                        fallbacks=fallback_keys(config),
                        auxiliary=auxiliary_key(config),
                    ),
                    spending=Spending(zone, config.budgets.warn_at, default_charge(config.budgets)),
                    tools=(cron_tool(cron),),
                    mcp=mcp_settings(config),
                    home=home.root,
                    environ=os.environ,
                    shared=cluster_share(cluster),
                )
            )
        except AssemblyError as error:
            raise ConfigError(str(error)) from None
        transcriber = make_transcriber(config)
        if transcriber is not None:
            stack.push_async_callback(transcriber.aclose)
        synthesizer = make_synthesizer(config, os.environ)
        if synthesizer is not None:
            stack.push_async_callback(synthesizer.aclose)
        yield Runtime(
            config=config,
            home=home,
            storage=storage,
            store=parts.store,
            locks=parts.locks,
            limiter=parts.limiter,
            pool=parts.pool,
            registry=parts.registry,
            memory=kept.memory,
            skills=kept.skills,
            agent=parts.agent,
            context_dir=config.agent.context_dir or context_dir,
            provider=kind,
            model=name,
            cron=cron,
            transcriber=transcriber,
            synthesizer=synthesizer,
            mcp=parts.mcp,
            cache_watch=parts.cache_watch,
            spending=parts.spending,
            cluster=cluster,
            hands=parts.hands,
        )


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


def cluster_share(cluster: Cluster | None) -> Shared | None:
    """What the cluster shares with the agent (fenced session leases, the request cap, the spend figures);
    None for one process (the agent keeps leases in the database, caps and figures in memory)."""
    if cluster is None:
        return None
    from gateway.cluster.shared import ClusterShare  # redis-py: cluster mode only

    return ClusterShare(cluster)
