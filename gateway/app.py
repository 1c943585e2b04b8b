"""``herald gateway run``: every enabled adapter, the router and the HTTP server in one process.

Start-up, in one ``AsyncExitStack`` (a failure closes what was opened): the agent runtime (with the
gateway's tables), the outbox sender, the adapters, recovery of what a previous run left unanswered,
the command menus (published only when they changed), the scheduler of cron jobs (runs missed while
the gateway was down happen now), the HTTP server (with the operator console, ``gateway.console``, and
the OpenAI-compatible API, ``gateway.openai_api``).

In a cluster (``cluster.redis_url``) every process starts the same way, except that adapters which
receive on demand connect for sending only, and the scheduler and the idle-review sweeper wait: the
process elected leader runs them and those adapters' receiving (``gateway.cluster``).

Shutdown (SIGTERM or SIGINT) drains instead of dropping: stop taking messages and starting scheduled
runs, let running turns and runs finish within ``gateway.drain_timeout`` (then cancel them: their
messages stay pending and are answered after the restart; a cut-off run is recorded as interrupted),
send what the outbox holds, then close everything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.base import Adapter, DeliveryError
from agent.db import StorageUnavailable
from gateway.commands import menu, menu_hash
from gateway.config import HeraldConfig
from gateway.console.serve import build_console, console_token, console_url
from gateway.console.server import PREFIX
from gateway.console.sources import BudgetSource, CacheMissSource
from gateway.core import AdapterFactory, cancel, open_chat_core
from gateway.cron.runner import CronRunner
from gateway.cron.scheduler import CronScheduler
from gateway.failures import PlatformStartFailed
from gateway.heap import freeze_startup_heap
from gateway.home import HeraldHome
from gateway.home.facts import GatewayFacts
from gateway.intake.router import Router
from gateway.openai_api.keys import KeyRing, key_ring
from gateway.openai_api.server import PREFIX as API_PREFIX
from gateway.openai_api.server import build_api
from gateway.platforms.build import build_adapters, enabled, no_platform
from gateway.server.http import HttpServer
from gateway.server.readiness import ReadinessCheck
from gateway.services import Services

if TYPE_CHECKING:
    from gateway.cluster.member import ClusterMember

log = logging.getLogger(__name__)

FLUSH_TIMEOUT = 10.0


@dataclass
class Gateway:
    services: Services
    router: Router
    http: HttpServer
    adapters: Sequence[Adapter]
    scheduler: CronScheduler
    cluster: ClusterMember | None = None  # cluster mode: this process in it

    async def drain(self) -> None:
        """Stop taking messages and starting runs, finish or checkpoint running turns and runs, send
        what is queued."""
        services = self.services
        self.scheduler.pause()
        await self.router.close()
        if self.cluster is not None:
            await self.cluster.resign()  # another process runs the connector from now on
        for adapter in self.adapters:
            await adapter.stop_receiving()
        timeout = services.settings.drain_timeout
        finished, _, _ = await asyncio.gather(
            services.lanes.drain(timeout), self.scheduler.drain(timeout), self.http.drain(timeout)
        )
        if not finished:
            log.warning("turns still running after %.0fs; they will be answered after the restart",
                        services.settings.drain_timeout)  # fmt: skip
            await services.lanes.shutdown()
        try:
            flushed = await services.sender.flush(FLUSH_TIMEOUT)
        except StorageUnavailable as error:  # stopping while the database is away: nothing is lost
            log.warning("the queued replies could not be read before shutdown (%s); they go out after the "
                        "restart", error)  # fmt: skip
            return
        if not flushed:
            log.warning("some replies could not be sent before shutdown; they go out after the restart")


async def publish_menus(adapters: Sequence[Adapter], services: Services) -> None:
    """Publish the command menu on each platform, only when it changed since the last publish."""
    commands = menu()
    digest = menu_hash(commands)
    facts = GatewayFacts(services.runtime.storage)
    for adapter in adapters:
        key = f"menu:{adapter.platform}"
        if await facts.recall(key) == digest:
            continue
        try:
            await adapter.set_commands(commands)
        except DeliveryError as error:
            log.warning("could not publish the %s command menu: %s", adapter.platform, error)
            continue
        await facts.remember(key, digest)


@asynccontextmanager
async def open_gateway(
    config: HeraldConfig,
    home: HeraldHome,
    *,
    adapters: AdapterFactory | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[Gateway]:
    """Start the gateway with the adapters ``adapters`` builds (default: one per registered platform
    ``environ`` has a token for, ``gateway.platforms.build``); on exit drain it and close everything."""
    tokens = environ or os.environ
    keys = key_ring(config.api.keys, home, tokens)  # a key missing or too weak stops the start at once
    if adapters is None and not enabled(tokens) and not len(keys):
        raise no_platform(home)  # before anything is opened
    if config.console.enabled:
        console_token(tokens)  # a token too weak to guard the console stops the start, before anything opens
    if config.gateway.allow_all:
        log.warning("gateway.allow_all is on: anyone who finds the bot can use it (and spend your tokens)")
    build = adapters or (lambda storage: build_adapters(config, tokens, storage))
    async with AsyncExitStack() as stack:
        core = await stack.enter_async_context(open_chat_core(config, home, build, cluster=True))
        services, router = core.services, core.router
        chosen = list(services.adapters.values())
        if not chosen and not len(keys):
            raise no_platform(home)
        http = reserve_http_server(stack, config, services, chosen, core.readiness)
        clustered = services.runtime.cluster is not None  # the elected member receives and schedules
        if not clustered:
            start_review_sweeper(stack, services)
        await start_adapters(stack, chosen, router, receive_all=not clustered)
        await router.recover()  # before any new message is handled (the router waits for it)
        await publish_menus(chosen, services)
        scheduler = open_scheduler(stack, config, services)
        member = await open_cluster_member(stack, services, chosen, scheduler) if clustered else None
        if member is None:
            await scheduler.start()
        await serve_http(stack, http, config, services, tokens, member, keys)
        gateway = Gateway(services, router, http, chosen, scheduler, member)
        served = [adapter.platform for adapter in chosen] + (["the OpenAI-compatible API"] if keys else [])
        log.info("gateway running: %s; %s", ", ".join(served), http.url)
        try:
            yield gateway
        finally:
            await gateway.drain()


def reserve_http_server(
    stack: AsyncExitStack,
    config: HeraldConfig,
    services: Services,
    adapters: Sequence[Adapter],
    checks: Sequence[ReadinessCheck],
) -> HttpServer:
    """The HTTP server, its address bound now (a port in use stops the start before any platform hears
    of this process); it serves from :func:`serve_http`."""
    http = HttpServer(
        config.gateway.http_host,
        config.gateway.http_port,
        adapters=adapters,
        facts=GatewayFacts(services.runtime.storage),
        metrics=services.metrics,
        checks=checks,
    )
    http.reserve()
    stack.push_async_callback(http.stop)
    return http


def start_review_sweeper(stack: AsyncExitStack, services: Services) -> None:
    """One process alone runs the idle-review sweeper itself (in a cluster the leader does)."""
    sweeping = asyncio.create_task(services.reviews.run(), name="review sweeper")
    stack.push_async_callback(cancel, sweeping)


async def start_adapters(
    stack: AsyncExitStack, adapters: Sequence[Adapter], router: Router, *, receive_all: bool
) -> None:
    """Connect every adapter; one that receives on demand (polling) waits for the leader in a cluster
    (``receive_all`` False)."""
    for adapter in adapters:
        try:
            await adapter.start(router.handle, receive=receive_all or not adapter.receive_on_demand)
        except DeliveryError as error:
            raise PlatformStartFailed(f"{adapter.platform} could not start: {error}") from error
        stack.push_async_callback(adapter.stop)


def open_scheduler(stack: AsyncExitStack, config: HeraldConfig, services: Services) -> CronScheduler:
    """The scheduler of cron jobs, not started: this process starts it, or the cluster's leader does."""
    runtime = services.runtime
    jobs = runtime.cron.jobs
    scheduler = CronScheduler(jobs, CronRunner(services, jobs), config.scheduler, runtime.cron.timezone)
    stack.push_async_callback(scheduler.close)
    return scheduler


async def open_cluster_member(
    stack: AsyncExitStack,
    services: Services,
    adapters: Sequence[Adapter],
    scheduler: CronScheduler,
) -> ClusterMember:
    """This process as a member of its cluster: the leader election and what the leader runs."""
    from gateway.cluster.member import open_member  # redis-py: cluster mode only
    from gateway.cluster.queue.work_queue import RedisWorkQueue

    runtime = services.runtime
    assert runtime.cluster is not None
    queue = services.lanes
    assert isinstance(queue, RedisWorkQueue), "a cluster process runs the cluster's work queue"
    return await stack.enter_async_context(
        open_member(
            runtime.cluster, adapters=adapters, scheduler=scheduler, reviews=services.reviews,
            queue=queue, session_leases=lambda: runtime.locks.held, metrics=services.metrics,
        )
    )  # fmt: skip


async def serve_http(
    stack: AsyncExitStack,
    http: HttpServer,
    config: HeraldConfig,
    services: Services,
    tokens: Mapping[str, str],
    member: ClusterMember | None,
    keys: KeyRing,
) -> None:
    """Serve /healthz, /readyz, /metrics, the webhooks, the console and the OpenAI-compatible API (with
    ``keys``) on the reserved address."""
    http.cluster = member
    console = await build_console(
        config, services, tokens, readiness=http.readiness, member=member,
        budgets=BudgetSource(services.budgets.book, services.runtime.storage),
        misses=CacheMissSource(services.runtime.store),
    )  # fmt: skip
    if console is not None:
        http.mount(PREFIX, console)
    api = build_api(config, services, keys)
    if api is not None:
        http.mount(API_PREFIX, api.application(), drain=api.drain)
    await http.start()
    if console is not None:
        services.console_url = console_url(config, http.url)


async def run_gateway(config: HeraldConfig, home: HeraldHome) -> int:
    """Run until SIGTERM or SIGINT, then drain and exit 0."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with open_gateway(config, home):
            freeze_startup_heap()  # the process's policy, so not in open_gateway (tests open many)
            await stop.wait()
            log.info("stopping: draining running turns (up to %.0fs)", config.gateway.drain_timeout)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    return 0
