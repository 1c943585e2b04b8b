"""The part every way of talking to Herald shares: runtime, stores, router, lanes, outbox sender.

``herald gateway run`` (``gateway.app``) and ``herald chat`` (``gateway.terminal``) both open this
core and add what they need around it (platform adapters, the HTTP server, the scheduler; or the
terminal's read loop). So a message typed in the terminal takes the same path as one sent on Telegram:
the router, the command table, the turn runner, the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from adapters.base import Adapter
from agent.storage.base import Storage
from gateway.auth import AccessPolicy, Authorizer, PlatformAccess
from gateway.chat_settings import ChatSettings
from gateway.cluster.sending import sending
from gateway.config import HeraldConfig
from gateway.home import HeraldHome
from gateway.inbox import Inbox
from gateway.lanes import Lanes
from gateway.media import MediaReader
from gateway.metrics import GatewayMetrics
from gateway.outbox import Outbox
from gateway.pairing import Pairing
from gateway.replies import Replies
from gateway.reviews import Reviews
from gateway.router import Router
from gateway.runtime import open_runtime
from gateway.sender import OutboxSender
from gateway.services import Services
from gateway.worker import Worker

# The adapters of this process, built once the storage is open: an adapter may keep state in it
# (Discord's deferred slash commands).
AdapterFactory = Callable[[Storage], Sequence[Adapter]]


@dataclass
class Core:
    services: Services
    router: Router


def access_policy(config: HeraldConfig, *, owners: Sequence[str] = ()) -> AccessPolicy:
    """Who may talk: the config's admins and allowlists, plus ``owners`` (the terminal's user)."""
    discord = config.discord
    return AccessPolicy(
        admins=frozenset([*config.gateway.admins, *owners]),
        allow_all=config.gateway.allow_all,
        platforms={
            "telegram": PlatformAccess(users=frozenset(config.telegram.allowed_users)),
            "discord": PlatformAccess(
                users=frozenset(discord.allowed_users),
                chats=frozenset(discord.allowed_channels),
                servers=frozenset(discord.allowed_guilds),
            ),
        },
    )


def require_mention(config: HeraldConfig) -> dict[str, bool]:
    return {"telegram": config.telegram.require_mention, "discord": config.discord.require_mention}


@asynccontextmanager
async def open_core(
    config: HeraldConfig,
    home: HeraldHome,
    adapters: AdapterFactory,
    *,
    owners: Sequence[str] = (),
    provider: str | None = None,
    model: str | None = None,
    context_dir: Path | None = None,
) -> AsyncIterator[Core]:
    """Open the shared core for the adapters ``adapters`` builds (not started: the caller starts them).

    ``provider``/``model`` override the configured model for new sessions and ``context_dir`` is where
    a project context file is looked up (both for the terminal).
    """
    async with AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(
            open_runtime(config, home, provider=provider, model=model, context_dir=context_dir)
        )
        metrics = GatewayMetrics()
        metrics.session_leases.set_function(lambda: runtime.locks.held)
        if runtime.cluster is not None:
            metrics.in_cluster(runtime.cluster.instance_id)
        outbox = Outbox(runtime.storage)
        by_platform = {adapter.platform: adapter for adapter in adapters(runtime.storage)}
        outbound = sending(runtime.cluster, by_platform, metrics)
        sender = OutboxSender(outbox, by_platform, outbound.budget, metrics, claimant=outbound.claimant)
        pairing = Pairing(runtime.storage)
        services = Services(
            runtime=runtime,
            settings=config.gateway,
            inbox=Inbox(runtime.storage),
            outbox=outbox,
            sender=sender,
            replies=Replies(outbox, sender, by_platform),
            adapters=by_platform,
            budget=outbound.budget,
            authorizer=Authorizer(access_policy(config, owners=owners), pairing),
            pairing=pairing,
            chat_settings=ChatSettings(runtime.storage),
            lanes=Lanes(config.gateway.max_concurrent_turns, on_depth=metrics.queue_depth.set),
            reviews=Reviews(runtime, config.review, metrics),
            media=MediaReader(config.media, config.gateway.max_attachment_mb, runtime.transcriber),
            metrics=metrics,
        )
        services.lanes.serve(Worker(services).run)
        stack.push_async_callback(services.reviews.aclose)
        sending_task = asyncio.create_task(sender.run(), name="outbox sender")
        stack.push_async_callback(cancel, sending_task)
        yield Core(services, Router(services, require_mention=require_mention(config)))


async def cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
