"""The part every way of talking to Herald shares: runtime, stores, router, lanes, outbox sender.

``herald gateway run`` (``gateway.app``) and ``herald chat`` (``gateway.cli.chat``) both open this
core and add what they need around it (platform adapters, the HTTP server, the scheduler; or the
terminal's read loop). So a message typed in the terminal takes the same path as one sent on a chat
platform:
the router, the command table, the turn runner, the outbox. Intake is handed its handlers here
(``gateway.wiring.handlers.ChatHandlers``): it knows neither the command table nor the turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.base import Adapter
from agent.api import Hands
from agent.db import Storage, StorageUnavailable
from gateway.access.auth import Authorizer, access_policy
from gateway.access.pairing import Pairing
from gateway.approvals.records import ApprovalRecords
from gateway.approvals.service import Approvals
from gateway.budgets.service import AdminWarnings, Budgets
from gateway.cluster.counting.sending import sending
from gateway.commands import command_in_lane
from gateway.config import HeraldConfig
from gateway.conversation.chat_settings import ChatSettings
from gateway.conversation.media import MediaReader
from gateway.conversation.reviews import ReviewClaims, Reviews
from gateway.delivery.replies import Replies
from gateway.delivery.sender import OutboxSender
from gateway.home import HeraldHome
from gateway.intake.lanes import Lanes
from gateway.intake.router import Router, lane_work_kind
from gateway.intake.turn_cap import TurnCap
from gateway.intake.work import WorkQueue
from gateway.intake.worker import Worker
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Outbox
from gateway.server.metrics import GatewayMetrics
from gateway.server.readiness import ReadinessCheck
from gateway.speech.replies import SpokenReplies
from gateway.speech.synthesizers import speech_retries
from gateway.wiring.handlers import ChatHandlers
from gateway.wiring.runtime import open_agent_runtime
from gateway.wiring.services import Services
from resilience.cancelling import cancel_and_wait

if TYPE_CHECKING:
    from gateway.cluster.redis import Cluster

# The adapters of this process, built once the storage is open: an adapter may keep records in it
# (adapters.records).
AdapterFactory = Callable[[Storage], Sequence[Adapter]]
log = logging.getLogger(__name__)


@dataclass
class Core:
    services: Services
    router: Router
    readiness: Sequence[ReadinessCheck] = ()  # besides adapters and database (gateway.http)


@asynccontextmanager
async def open_chat_core(
    config: HeraldConfig,
    home: HeraldHome,
    adapters: AdapterFactory,
    *,
    owners: Sequence[str] = (),
    provider: str | None = None,
    model: str | None = None,
    context_dir: Path | None = None,
    cluster: bool = False,
) -> AsyncIterator[Core]:
    """Open the shared core for the adapters ``adapters`` builds (not started: the caller starts them).

    ``provider``/``model`` override the configured model for new sessions and ``context_dir`` is where
    a project context file is looked up (both for the terminal). ``cluster``: with ``cluster.redis_url``
    set, this process is one of the cluster's workers (the gateway; never the terminal, whose lanes run
    only its own chat).
    """
    async with AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(
            open_agent_runtime(config, home, provider=provider, model=model, context_dir=context_dir)
        )
        metrics = GatewayMetrics()
        metrics.session_leases.set_function(lambda: runtime.locks.held)
        metrics.count_tasks(asyncio.get_running_loop())
        if runtime.storage.connections_out() is not None:  # a pool: PostgreSQL
            metrics.count_db_connections(runtime.storage.connections_out)
        runtime.cache_watch.on_miss(metrics.count_cache_miss)
        if runtime.cluster is not None:
            metrics.in_cluster(runtime.cluster.instance_id)
            metrics.count_redis_connections(runtime.cluster.connections)
        outbox = Outbox(runtime.storage)
        by_platform = {adapter.platform: adapter for adapter in adapters(runtime.storage)}
        outbound = sending(runtime.cluster, by_platform, metrics)
        sender = OutboxSender(outbox, by_platform, outbound.pacing, metrics, claimant=outbound.claimant)
        pairing = Pairing(runtime.storage)
        policy = access_policy(config, owners=owners)
        authorizer = Authorizer(policy, pairing)
        inbox = Inbox(runtime.storage)
        in_cluster = runtime.cluster if cluster else None
        turns = turn_cap(config, in_cluster)
        lanes, readiness = await open_lanes(stack, config, in_cluster, inbox, metrics, turns)
        readiness += hands_readiness(runtime.hands)
        replies = Replies(outbox, sender, by_platform)
        approvals = Approvals(
            ApprovalRecords(runtime.storage),
            replies,
            outbox,
            by_platform,
            runtime.store.audit,
            timeout=config.tools.approval_timeout,
        )
        if in_cluster is not None:
            await approvals_across(stack, in_cluster, approvals)
        services = Services(
            runtime=runtime,
            settings=config.gateway,
            inbox=inbox,
            outbox=outbox,
            sender=sender,
            replies=replies,
            adapters=by_platform,
            pacing=outbound.pacing,
            authorizer=authorizer,
            pairing=pairing,
            chat_settings=ChatSettings(runtime.storage),
            lanes=lanes,
            turns=turns,
            reviews=Reviews(runtime, config.review, metrics, authorizer, claims=review_claims(in_cluster)),
            media=MediaReader(
                config.media,
                config.gateway.max_attachment_mb,
                runtime.transcriber,
                runtime.store,
                payer=runtime.agent.calls,
            ),
            metrics=metrics,
            budgets=Budgets(config.budgets, runtime.spending, runtime.store.spending),
            speech=SpokenReplies(
                config.tts, runtime.synthesizer, runtime.agent.calls, speech_retries(config)
            ),
            approvals=approvals,
        )
        runtime.spending.on_warning(
            AdminWarnings(config.gateway.admins, runtime.store, services.replies, runtime.spending)
        )
        handlers = ChatHandlers(services)
        services.lanes.serve(Worker(services, handlers).run)
        stack.push_async_callback(services.reviews.aclose)
        sending_task = asyncio.create_task(sender.run(), name="outbox sender")
        stack.push_async_callback(cancel, sending_task)
        yield Core(services, Router(services, handlers, require_mention=policy.require_mention()), readiness)


def review_claims(cluster: Cluster | None) -> ReviewClaims | None:
    """In a gateway process of a cluster: one review per chat over the processes, stopped by a live turn
    on any of them."""
    if cluster is None:
        return None
    from gateway.cluster.leases.review_claims import (
        ReviewClaims as ClusterReviewClaims,  # redis-py: cluster only
    )

    return ClusterReviewClaims(cluster.redis, instance=cluster.instance_id, ttl=cluster.settings.lease_ttl)


async def approvals_across(stack: AsyncExitStack, cluster: Cluster, approvals: Approvals) -> None:
    """A decision made on any process wakes the turn that waits for it on this one at once."""
    from gateway.cluster.approvals import ApprovalChannel  # redis-py: cluster mode only
    from resilience.loops import BackgroundLoop

    channel = ApprovalChannel(cluster.redis, approvals.wake)
    approvals.announce = channel.announce
    await stack.enter_async_context(BackgroundLoop("the approvals channel", channel.listen))


def hands_readiness(hands: Hands | None) -> list[ReadinessCheck]:
    """``/readyz`` is not ready while every thread of the file tools is stuck (a hung disk)."""
    if hands is None:
        return []

    async def probe() -> None:
        if (why := hands.starved()) is not None:
            raise RuntimeError(why)

    return [ReadinessCheck("file tools", probe)]


async def open_lanes(
    stack: AsyncExitStack,
    config: HeraldConfig,
    cluster: Cluster | None,
    inbox: Inbox,
    metrics: GatewayMetrics,
    turns: TurnCap,
) -> tuple[WorkQueue, list[ReadinessCheck]]:
    """This process's lanes; or, for a gateway process of a cluster, its name claimed
    (``gateway.cluster.instance``) and the cluster's work queue (and what ``/readyz`` must ask of them and
    of Redis). Either runs each chat's work under a slot of ``turns``."""
    if cluster is None:
        return Lanes(turns, on_depth=metrics.queue_depth.set), []
    from gateway.cluster.instance import claimed
    from gateway.cluster.queue.chat_order import ChatOrder  # redis-py: cluster mode only
    from gateway.cluster.queue.work_queue import cluster_work_queue

    claim = await stack.enter_async_context(claimed(cluster))  # one process per name, before any work
    max_mb = config.gateway.max_attachment_mb
    order = ChatOrder(inbox, lambda row: lane_work_kind(row, max_mb, command_in_lane))
    queue = await stack.enter_async_context(
        cluster_work_queue(
            cluster, order, local_limit=config.gateway.max_concurrent_turns, turn_cap=turns, metrics=metrics
        )
    )
    return queue, [
        ReadinessCheck("redis", cluster.probe),
        ReadinessCheck("work queue", queue.probe),
        ReadinessCheck("instance id", claim.probe),
    ]


def turn_cap(config: HeraldConfig, cluster: Cluster | None) -> TurnCap:
    """The one cap on turns (``gateway.intake.turn_cap``) that chats, the API and cron take slots of:
    this process's, and in a gateway process of a cluster the cluster-wide one too."""
    limit = config.gateway.max_concurrent_turns
    if cluster is None:
        return TurnCap(limit)
    from gateway.cluster.queue.work_queue import cluster_turn_cap  # redis-py: cluster mode only

    return cluster_turn_cap(cluster, limit)


async def cancel(task: asyncio.Task[None]) -> None:
    await cancel_and_wait([task])


async def finish_work(
    services: Services, seconds: float, *, flush_seconds: float, also: Sequence[Awaitable[bool]] = ()
) -> None:
    """The one drain of a chat core, once it takes no more messages (``herald gateway run``'s and the
    terminal's): running turns (and ``also``: the scheduler's runs) finish within ``seconds``, or are
    cancelled, their messages left pending for the next start to answer; then what the outbox holds is
    sent within ``flush_seconds``. Nothing is lost either way: what is not sent now goes out after the
    restart, and a database away at the end is said in one line, not raised."""
    finished, *_ = await asyncio.gather(services.lanes.drain(seconds), *also)
    if not finished:
        log.warning("turns still running after %.0fs; they will be answered after the restart", seconds)
        await services.lanes.shutdown()
    try:
        flushed = await services.sender.flush(flush_seconds)
    except StorageUnavailable as error:  # stopping while the database is away: nothing is lost
        log.warning("the queued replies could not be read before shutdown (%s); they go out after the "
                    "restart", error)  # fmt: skip
        return
    if not flushed:
        log.warning("some replies could not be sent before shutdown; they go out after the restart")
