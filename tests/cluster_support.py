"""Several gateways in one event loop as one cluster: one PostgreSQL, one Redis, one fake Telegram.

Every gateway is a worker; the fake Telegram delivers updates by webhook to the first one (as a load
balancer would to any), whose router stores them and appends them to the work stream. Each gateway has
its own Telegram adapter for sending. A test may also hand messages to any gateway's router directly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from adapters.base import ChatType, InboundMessage
from gateway.app import Gateway, open_gateway
from gateway.cluster.queue.work_queue import RedisWorkQueue
from gateway.home import HeraldHome
from gateway.ledger.inbox import InboxState
from gateway.tables import inbox, outbox
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.gateway_support import gateway_config
from tests.postgres import free_port

SETTLE_TIMEOUT = 60.0
CLOSE_TIMEOUT = 15.0  # a gateway that takes longer to close is a failure to report, not a hang
LEASE_TTL = 5.0  # the smallest cluster.lease_ttl: a dead worker's entry is claimed after this


def answer_each(body: dict[str, Any], api: str) -> Reply:
    """A recognisable answer per question."""
    question = body["messages"][-1]["content"][0]["text"]
    return Reply(text=f"Answer to {question}")


def inbound(chat_id: int, text: str, message_id: str) -> InboundMessage:
    """A direct message as the Telegram adapter would hand it to a router."""
    return InboundMessage(
        platform="telegram",
        chat_id=str(chat_id),
        chat_type=ChatType.DIRECT,
        user_id=str(chat_id),
        user_name=f"User {chat_id}",
        message_id=message_id,
        text=text,
        timestamp=time.time(),
        addressed=True,
    )


@dataclass
class Cluster:
    fake: FakeTelegram
    emulator: ProviderEmulator
    gateways: list[Gateway]
    stacks: list[AsyncExitStack] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)

    def queue(self, index: int) -> RedisWorkQueue:
        lanes = self.gateways[index].services.lanes
        assert isinstance(lanes, RedisWorkQueue)
        return lanes

    @property
    def live(self) -> list[int]:
        return [index for index in range(len(self.gateways)) if index not in self.closed]

    async def close(self, index: int) -> None:
        """Stop gateway ``index`` as its process would on SIGTERM (drain, then cut off what still runs)."""
        self.closed.add(index)
        await self.stacks[index].aclose()

    def running_at(self) -> list[int]:
        """The gateways running a turn or command now."""
        return [index for index in self.live if self.queue(index).running]

    async def wait_running(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109 - bounded wait
        """The gateway that runs a turn, once one does."""
        async with asyncio.timeout(timeout):
            while not (running := self.running_at()):  # noqa: ASYNC110 - polled state of several queues
                await asyncio.sleep(0.02)
        return running[0]

    async def settled(self, timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: ASYNC109 - bounded wait
        """Every update stored, every message answered, every reply sent, no queue holding anything."""
        services = self.gateways[self.live[0]].services
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (
                not self.fake.pending_updates()
                and all(self.queue(index).depth == 0 for index in self.live)
                and not await services.inbox.pending()
                and await services.outbox.pending_count() == 0
            ):
                return
            await asyncio.sleep(0.05)
        pending = [(row.id, row.message.text) for row in await services.inbox.pending()]
        raise AssertionError(
            f"the cluster did not settle in {timeout}s: updates not stored "
            f"{len(self.fake.pending_updates())}, queue depths {[self.queue(i).depth for i in self.live]}, "
            f"messages pending {pending}, replies unsent {await services.outbox.pending_count()}"
        )

    async def queued(self, chat_id: int) -> list[str]:
        """Per answered message of a chat, the final text queued in the outbox, in the order the answers
        were queued: what the work queue made of the chat's messages (each answered once, in order)."""
        query = (
            sa.select(outbox.c.inbox_id, outbox.c.text)
            .where(outbox.c.chat_id == str(chat_id), outbox.c.inbox_id.is_not(None))
            .order_by(outbox.c.id)
        )
        storage = self.gateways[self.live[0]].services.runtime.storage
        rows = await storage.read(lambda conn: [(int(row[0]), str(row[1])) for row in conn.execute(query)])
        final: dict[int, str] = {}
        for inbox_id, text in rows:
            final.pop(inbox_id, None)  # its last operation decides its place and text
            final[inbox_id] = text
        return list(final.values())

    def answers(self, chat_id: int) -> list[str]:
        """What the chat shows, a reply sent twice in a row counted once: until outbox items are claimed
        (each sent by one process), two processes' senders may both send one."""
        shown = [m.text for m in self.fake.messages(chat_id) if not m.deleted]
        return [text for index, text in enumerate(shown) if index == 0 or shown[index - 1] != text]

    async def states(self) -> dict[str, int]:
        """Inbox rows by state."""
        services = self.gateways[self.live[0]].services
        counts: dict[str, int] = {}
        for state in InboxState:
            counts[state.value] = 0

        def count(conn: sa.Connection) -> None:
            for row in conn.execute(sa.select(inbox.c.state, sa.func.count()).group_by(inbox.c.state)):
                counts[row[0]] = int(row[1])

        await services.runtime.storage.read(count)
        return counts

    def turns_answered(self, index: int) -> float:
        metrics = self.gateways[index].services.metrics
        return float(metrics.turns.labels("answered")._value.get())


@asynccontextmanager
async def open_cluster(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    *,
    redis_url: str,
    database_url: str,
    count: int = 3,
    cluster: dict[str, Any] | None = None,
    gateway: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    budgets: dict[str, Any] | None = None,
    **sections: Any,
) -> AsyncIterator[Cluster]:
    """``count`` gateways on one PostgreSQL and one Redis; the first receives the webhooks; ``environ``:
    more variables each reads (besides the bot token); ``budgets``: the spend limits of every one;
    ``sections``: more config sections."""
    fake = FakeTelegram()
    port = free_port()
    async with fake.serve() as base_url:
        result = Cluster(fake, emulator, [])
        try:
            for index in range(count):
                config = gateway_config(
                    emulator_url,
                    base_url,
                    storage={"url": database_url},
                    gateway={
                        "allow_all": True,
                        "http_port": port if index == 0 else 0,
                        "stream_edit_interval": 0,  # answers go out by the outbox, where queued() reads them
                        **(gateway or {}),
                    },
                    telegram={"mode": "webhook", "webhook_url": f"http://127.0.0.1:{port}/telegram/webhook"},
                    cluster={
                        "redis_url": redis_url,
                        "instance_id": f"g{index}",
                        "lease_ttl": LEASE_TTL,
                        **(cluster or {}),
                    },
                    budgets=budgets or {},  # none: the defaults
                    **sections,
                )
                stack = AsyncExitStack()
                variables = {"TELEGRAM_BOT_TOKEN": fake.token, **(environ or {})}
                opened = await stack.enter_async_context(open_gateway(config, home, environ=variables))
                result.gateways.append(opened)
                result.stacks.append(stack)
            async with asyncio.timeout(10):
                for index in range(count):
                    queue = result.queue(index)
                    await queue.control.subscribed.wait()
                    while queue.problem is not None:  # noqa: ASYNC110 - the queue reaches Redis soon
                        await asyncio.sleep(0.02)
            yield result
        finally:
            stuck = []
            for index in reversed(range(len(result.stacks))):
                if index not in result.closed:
                    result.closed.add(index)
                    try:
                        async with asyncio.timeout(CLOSE_TIMEOUT):
                            await result.stacks[index].aclose()
                    except TimeoutError:
                        stuck.append(index)
            if stuck:  # raised from here, the test's own failure (if any) shows as its context
                raise AssertionError(f"gateway(s) {stuck} did not close within {CLOSE_TIMEOUT}s")
