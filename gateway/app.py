"""``herald gateway run``: every enabled adapter, the router and the HTTP server in one process.

Start-up, in one ``AsyncExitStack`` (a failure closes what was opened): outside a cluster the home's
gateway lock (a second gateway on the home is refused: ``gateway.home.gateway_lock``), the agent
runtime (with the gateway's tables), the outbox sender, the adapters, recovery of what a previous run
left unanswered, the command menus (published only when they changed), the scheduler of cron jobs
(runs missed while the gateway was down happen now), the HTTP server (with the operator console,
``gateway.console``, and the OpenAI-compatible API, ``gateway.openai_api``).

With ``bots:`` in config.yaml the process serves several bots (``gateway.bots``): each bot's part (its
core, adapters, scheduler, cluster membership) is opened as the one bot's is, from its own configuration,
home and tokens, and only the HTTP server is shared: one console shows each bot's pages, and the API
answers each key with the bot the key names.

In a cluster (``cluster.redis_url``) every process starts the same way, except that adapters which
receive on demand connect for sending only, and the scheduler and the idle-review sweeper wait: the
process elected leader runs them and those adapters' receiving (``gateway.cluster``).

Shutdown (SIGTERM or SIGINT) drains instead of dropping: in a cluster, first hand the connector's leases
over (another process receives at once), then stop taking messages and starting scheduled runs, let
running turns and runs finish within ``gateway.drain_timeout`` (then cancel them: their
messages stay pending and are answered after the restart; a cut-off run is recorded as interrupted),
send what the outbox holds, then close everything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.base import Adapter, DeliveryError, StatusSink
from gateway.bots.logs import bot_step, speaking_for
from gateway.bots.metrics import BotsMetrics
from gateway.bots.profiles import BOTS_DIR, BotProfile, bot_profiles, prepare_profile
from gateway.commands import menu, menu_hash
from gateway.config import HeraldConfig
from gateway.console.serve import ConsoleBot, build_console, console_token, console_url
from gateway.console.server import PREFIX
from gateway.cron.runner import CronRunner
from gateway.cron.scheduler import CronScheduler
from gateway.delivery.statuses import DeliveryStatuses
from gateway.failures import PlatformStartFailed
from gateway.heap import freeze_startup_heap
from gateway.home import HeraldHome
from gateway.home.facts import GatewayFacts
from gateway.home.gateway_lock import hold_gateway_lock
from gateway.intake.router import Router
from gateway.openai_api.keys import KeyRing, key_ring
from gateway.openai_api.server import PREFIX as API_PREFIX
from gateway.openai_api.server import build_api
from gateway.platforms.build import build_adapters, enabled, no_platform
from gateway.retention.pruner import Pruner
from gateway.server.http import HttpServer
from gateway.server.metrics import GatewayMetrics
from gateway.server.readiness import ReadinessCheck
from gateway.wiring.core import AdapterFactory, cancel, finish_work, open_chat_core
from gateway.wiring.services import Services
from resilience.loops import BackgroundLoop

if TYPE_CHECKING:
    from gateway.cluster.member import ClusterMember

log = logging.getLogger(__name__)

FLUSH_TIMEOUT = 10.0


@dataclass
class BotGateway:
    """One bot's part of the gateway: its core, its adapters, its scheduler (``name`` None: the one bot
    of a home without ``bots:``)."""

    name: str | None
    services: Services
    router: Router
    adapters: Sequence[Adapter]
    scheduler: CronScheduler
    readiness: Sequence[ReadinessCheck] = ()  # what /readyz asks of the bot besides adapters and database
    cluster: ClusterMember | None = None  # cluster mode: this process in the bot's cluster

    async def stop_taking(self) -> None:
        """Stop taking messages and starting scheduled runs."""
        with speaking_for(self.name):
            await self._stop_taking()

    async def _stop_taking(self) -> None:
        self.scheduler.pause()
        if self.cluster is not None:  # first: the next process receives at once (its router still stores
            await self.cluster.resign()  # what arrives meanwhile; another process runs the connector now)
        await self.router.close()
        for adapter in self.adapters:
            await adapter.stop_receiving()

    async def finish(self) -> None:
        """Let running turns and runs finish (or checkpoint them), then send what is queued."""
        with speaking_for(self.name):
            await self._finish()

    async def _finish(self) -> None:
        timeout = self.services.settings.drain_timeout
        runs = self.scheduler.drain(timeout)
        await finish_work(self.services, timeout, flush_seconds=FLUSH_TIMEOUT, also=[runs])


@dataclass
class Gateway:
    bots: Sequence[BotGateway]  # one without ``bots:``; else one per bot, in config order
    http: HttpServer

    # The first bot's parts: the only bot's without ``bots:`` (each bot's are in ``bots``).
    @property
    def services(self) -> Services:
        return self.bots[0].services

    @property
    def router(self) -> Router:
        return self.bots[0].router

    @property
    def adapters(self) -> Sequence[Adapter]:
        return self.bots[0].adapters

    @property
    def scheduler(self) -> CronScheduler:
        return self.bots[0].scheduler

    @property
    def cluster(self) -> ClusterMember | None:
        return self.bots[0].cluster

    def bot(self, name: str) -> BotGateway:
        """The part of bot ``name`` (``bots:``)."""
        return next(bot for bot in self.bots if bot.name == name)

    async def drain(self) -> None:
        """Stop taking messages and starting runs, finish or checkpoint running turns and runs, send
        what is queued."""
        for bot in self.bots:
            await bot.stop_taking()
        timeout = max(bot.services.settings.drain_timeout for bot in self.bots)
        await asyncio.gather(*(bot.finish() for bot in self.bots), self.http.drain(timeout))


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
    ``environ`` has a token for, ``gateway.platforms.build``; with ``bots:``, each bot's from its own
    tokens); on exit drain it and close everything."""
    tokens = environ or os.environ
    keys = key_ring(config.api.keys, home, tokens)  # a key missing or too weak stops the start at once
    profiles = bot_profiles(config, home, tokens)  # a bot's token that is not set stops it too
    if adapters is not None and config.bots:
        raise ValueError("open_gateway(adapters=...) builds one bot's adapters; bots: builds each bot's own")
    if adapters is None and not any(enabled(profile.environ) for profile in profiles) and not len(keys):
        raise no_platform(home)  # before anything is opened
    if config.console.enabled:
        console_token(tokens)  # a token too weak to guard the console stops the start, before anything opens
    for profile in profiles:
        if profile.config.gateway.allow_all:
            with speaking_for(profile.name):
                log.warning("gateway.allow_all is on: anyone who finds the bot can use it (and spend your "
                            "tokens)")  # fmt: skip
    async with AsyncExitStack() as stack:
        if any(profile.config.cluster.redis_url is None for profile in profiles):  # this process alone
            stack.callback(os.close, hold_gateway_lock(home))  # a second gateway on the home stops here
        bots: list[BotGateway] = []
        for profile in profiles:
            with bot_step(stack, profile.name) as step:
                bots.append(await open_bot(step, profile, adapters))
        chosen = [adapter for bot in bots for adapter in bot.adapters]
        if not chosen and not len(keys):
            raise no_platform(home)
        http = reserve_http_server(stack, config, bots, chosen)
        for bot in bots:
            clustered = bot.services.runtime.cluster is not None  # the elected member receives and schedules
            with bot_step(stack, bot.name) as step:
                if not clustered:
                    start_review_sweeper(step, bot.services)
                    await step.enter_async_context(storage_pruning(bot.services))
                statuses = DeliveryStatuses(bot.services.outbox, bot.services.metrics)
                await start_adapters(step, bot.adapters, bot.router, statuses, receive_all=not clustered)
        for bot in bots:
            with speaking_for(bot.name):
                await bot.router.recover()  # before any new message is handled (the router waits for it)
                await publish_menus(bot.adapters, bot.services)
        for bot in bots:
            with bot_step(stack, bot.name) as step:
                if bot.services.runtime.cluster is not None:
                    bot.cluster = await open_cluster_member(step, bot.services, bot.adapters, bot.scheduler)
                else:
                    await bot.scheduler.start()
        await serve_http(http, config, bots, tokens, keys)
        gateway = Gateway(bots, http)
        served = [served_line(bot) for bot in bots] + (["the OpenAI-compatible API"] if keys else [])
        log.info("gateway running: %s; %s", "; ".join(served), http.url)
        try:
            yield gateway
        finally:
            await gateway.drain()


async def open_bot(stack: AsyncExitStack, profile: BotProfile, adapters: AdapterFactory | None) -> BotGateway:
    """One bot's core, adapters (built, not started) and scheduler (not started), from its profile."""
    if profile.name is not None:
        prepare_profile(profile)
    config, environ = profile.config, profile.environ
    build = adapters or (lambda storage: build_adapters(config, environ, storage))
    core = await stack.enter_async_context(open_chat_core(config, profile.home, build, cluster=True))
    services = core.services
    scheduler = open_scheduler(stack, config, services)
    chosen = list(services.adapters.values())
    if profile.name is not None:
        for adapter in chosen:  # one HTTP server: each bot's webhooks under its own path
            if adapter.webhook_path is not None:
                adapter.webhook_path = f"/{BOTS_DIR}/{profile.name}{adapter.webhook_path}"
    return BotGateway(profile.name, services, core.router, chosen, scheduler, core.readiness)


def served_line(bot: BotGateway) -> str:
    platforms = ", ".join(adapter.platform for adapter in bot.adapters) or "no platform"
    return f"bot {bot.name} on {platforms}" if bot.name else platforms


def reserve_http_server(
    stack: AsyncExitStack, config: HeraldConfig, bots: Sequence[BotGateway], adapters: Sequence[Adapter]
) -> HttpServer:
    """The HTTP server, its address bound now (a port in use stops the start before any platform hears
    of this process); it serves from :func:`serve_http`. With several bots: every bot's database and
    checks in ``/readyz``, every bot's metrics in ``/metrics`` (labelled), every bot's webhooks."""
    first = bots[0]
    checks = [check for bot in bots for check in named_checks(bot)]
    metrics: GatewayMetrics | BotsMetrics = first.services.metrics
    if len(bots) > 1:
        checks += [database_check(bot) for bot in bots[1:]]
        metrics = BotsMetrics({str(bot.name): bot.services.metrics for bot in bots})
    http = HttpServer(
        config.gateway.http_host,
        config.gateway.http_port,
        adapters=adapters,
        facts=GatewayFacts(first.services.runtime.storage),
        metrics=metrics,
        checks=checks,
    )
    http.reserve()
    stack.push_async_callback(http.stop)
    return http


def named_checks(bot: BotGateway) -> list[ReadinessCheck]:
    """The bot's readiness checks, named after the bot when there are several."""
    if bot.name is None:
        return list(bot.readiness)
    return [ReadinessCheck(f"bot {bot.name}: {check.name}", check.probe) for check in bot.readiness]


def database_check(bot: BotGateway) -> ReadinessCheck:
    """A bot's own database takes writes (the first bot's is the HTTP server's own check)."""
    facts = GatewayFacts(bot.services.runtime.storage)
    probe = "ready_probe"
    return ReadinessCheck(f"bot {bot.name}: database", lambda: facts.remember(probe, str(time.time())))


def start_review_sweeper(stack: AsyncExitStack, services: Services) -> None:
    """One process alone runs the idle-review sweeper itself (in a cluster the leader does)."""
    sweeping = asyncio.create_task(services.reviews.run(), name="review sweeper")
    stack.push_async_callback(cancel, sweeping)


def storage_pruning(services: Services) -> BackgroundLoop:
    """Retention's pruning every ``storage.retention.interval`` (one process alone; a cluster's leader)."""
    runtime = services.runtime
    pruner = Pruner(runtime.storage, runtime.config.storage.retention)
    return BackgroundLoop("the storage pruner", pruner.run)


async def start_adapters(
    stack: AsyncExitStack,
    adapters: Sequence[Adapter],
    router: Router,
    statuses: StatusSink,
    *,
    receive_all: bool,
) -> None:
    """Connect every adapter; one that receives on demand (polling) waits for the leader in a cluster
    (``receive_all`` False). ``statuses``: where an adapter reports what became of a sent message."""
    for adapter in adapters:
        adapter.status_sink = statuses
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
            pruning=lambda: storage_pruning(services),
        )
    )  # fmt: skip


async def serve_http(
    http: HttpServer,
    config: HeraldConfig,
    bots: Sequence[BotGateway],
    tokens: Mapping[str, str],
    keys: KeyRing,
) -> None:
    """Serve /healthz, /readyz, /metrics, the webhooks, the console (every bot's pages) and the
    OpenAI-compatible API (with ``keys``, each answered by its bot) on the reserved address."""
    http.cluster = bots[0].cluster
    shown = [ConsoleBot(bot.name, bot.services, bot.cluster) for bot in bots]
    console = await build_console(config, shown, tokens, readiness=http.readiness)
    if console is not None:
        http.mount(PREFIX, console)
    api = build_api(config.api, keys, {bot.name: bot.services for bot in bots})
    if api is not None:
        http.mount(API_PREFIX, api.application(), drain=api.drain)
    await http.start()
    if console is not None:
        for bot in bots:  # a bot's /console link logs in to its own pages (gateway.console.bots)
            bot.services.console_url = console_url(config, http.url)


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
