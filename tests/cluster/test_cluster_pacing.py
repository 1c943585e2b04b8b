"""The shared send pacing on a real Redis: three processes' budgets together keep Telegram's per-chat
and per-bot rates, a 429 seen by one process pauses the chat (or the bot) for the others, and a Redis
that is down holds sends back instead of letting them through unpaced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from adapters.base import ChatAddress, DeliveryError, OutboundText, SendRate
from adapters.telegram.ratelimit import BOT_RATE, CHAT_RATE, GROUP_RATE, telegram_rates
from agent.db.connect import open_storage
from agent.db.urls import StorageUrl, parse_storage_url
from gateway.cluster.counting.pacing import RedisSendPacing
from gateway.cluster.counting.sending import sending
from gateway.cluster.redis import Cluster, open_redis
from gateway.cluster.watch import ConnectionWatch
from gateway.config import ClusterSettings
from gateway.delivery.pacing import PacingUnavailable
from gateway.delivery.sender import OutboxSender
from gateway.ledger.outbox import Operation, Outbox, Outgoing
from gateway.server.metrics import GatewayMetrics
from tests.cluster.test_cluster_outbox import RecordingAdapter, Sent, row
from tests.conftest import postgres_server
from tests.redis_server import RedisServer

CHAT = ChatAddress("telegram", "42")


def telegram(address: ChatAddress) -> Sequence[SendRate]:
    return telegram_rates(address.chat_id)


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as opened:
        yield opened


async def budget(
    stack: AsyncExitStack, redis_server: RedisServer, metrics: GatewayMetrics | None = None
) -> RedisSendPacing:
    """One process's budget, on a Redis connection of its own."""
    redis = await stack.enter_async_context(open_redis(redis_server.url))
    return RedisSendPacing(redis, telegram, metrics or GatewayMetrics())


def test_telegram_publishes_its_rates_and_a_groups_minute() -> None:
    assert telegram_rates("42") == (BOT_RATE, CHAT_RATE)
    assert telegram_rates("-1001") == (BOT_RATE, CHAT_RATE, GROUP_RATE)
    assert (BOT_RATE.amount, CHAT_RATE.amount, GROUP_RATE.amount, GROUP_RATE.seconds) == (30, 1, 20, 60)


def most_in_any_window(times: list[float], seconds: float) -> int:
    """The largest number of ``times`` that fall within ``seconds`` of each other."""
    ordered = sorted(times)
    return max((sum(1 for t in ordered if start <= t < start + seconds) for start in ordered), default=0)


async def test_three_processes_together_keep_telegrams_per_chat_and_per_bot_rates(
    stack: AsyncExitStack, redis_server: RedisServer
) -> None:
    metrics = [GatewayMetrics() for _ in range(3)]
    budgets = [await budget(stack, redis_server, m) for m in metrics]
    to_chat: list[float] = []  # when an operation to the one busy chat was let through
    to_any: list[float] = []  # when any operation was let through

    async def go(process: int, address: ChatAddress, times: list[float]) -> None:
        await budgets[process].wait(address)
        moment = time.monotonic()
        times.append(moment)
        to_any.append(moment)

    busy_chat = [go(n % 3, CHAT, to_chat) for n in range(4)]  # every process sends to one chat
    many_chats = [go(n % 3, ChatAddress("telegram", str(1000 + n)), []) for n in range(80)]
    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*busy_chat, *many_chats), 30.0)

    assert len(to_any) == 84
    # Redis counts when it let an operation through; this test sees it later by however long the event
    # loop took to get back to the waiter (on a busy machine, a good fraction of a second). So the bounds
    # are generous, yet far from what three processes pacing alone would do (all 84 at once, 4 to the chat).
    assert most_in_any_window(to_chat, 1.0) <= 2 and max(to_chat) - min(to_chat) >= 2.0  # 1/s: 3 s apart
    assert most_in_any_window(to_any, 1.0) <= 40  # 30/s
    assert time.monotonic() - started >= 2.0  # 84 operations at 30/s: the third second at least
    assert all(b'gateway_sends_paced_total{platform="telegram"}' in m.render() for m in metrics)


async def test_a_group_whose_minute_is_full_is_postponed_by_the_sender_not_waited_for(
    stack: AsyncExitStack, redis_server: RedisServer
) -> None:
    first, second = await budget(stack, redis_server), await budget(stack, redis_server)
    group = ChatAddress("telegram", "-100")
    limited = RedisSendPacing(first._redis, lambda _: [SendRate("chat", 2, 60)], GatewayMetrics())
    for _ in range(2):
        await limited.wait(group)
    assert 55 < await limited.paused_for(group) <= 60  # the sender postpones an item this long
    assert await second.paused_for(group) < 1.5  # Telegram's own rates for the group: 1/s, 20/min


async def test_a_429_on_one_process_pauses_the_chat_for_the_others(
    stack: AsyncExitStack, redis_server: RedisServer
) -> None:
    seen_it, others = await budget(stack, redis_server), await budget(stack, redis_server)
    await seen_it.penalize(CHAT, 30.0)
    assert 29 < await others.paused_for(CHAT) <= 30
    assert await others.paused_for(ChatAddress("telegram", "43")) == 0.0  # other chats go on
    await seen_it.penalize(CHAT, 5.0)  # a shorter pause does not shorten the longer one
    assert await others.paused_for(CHAT) > 25

    short = ChatAddress("telegram", "44")
    await seen_it.penalize(short, 0.5)
    started = time.monotonic()
    await asyncio.wait_for(others.wait(short), 5.0)
    assert time.monotonic() - started >= 0.4


async def test_a_bot_wide_429_pauses_every_chat_of_the_platform_for_every_process(
    stack: AsyncExitStack, redis_server: RedisServer
) -> None:
    seen_it, others = await budget(stack, redis_server), await budget(stack, redis_server)
    await seen_it.penalize(ChatAddress("discord", "1"), 20.0, bot_wide=True)
    assert await others.paused_for(ChatAddress("discord", "2")) > 19
    assert await others.paused_for(CHAT) == 0.0  # another platform


@pytest.fixture
def other_database_url(backend: str) -> Iterator[str | None]:
    """A second database on the backend under test (None on SQLite: a second file), for a process whose
    outbox must not be the first one's."""
    if backend == "sqlite":
        yield None
        return
    server = postgres_server()
    url = server.new_database()
    try:
        yield url
    finally:
        server.drop(url)


async def test_the_other_process_postpones_its_reply_to_a_chat_a_429_paused(
    stack: AsyncExitStack,
    redis_server: RedisServer,
    tmp_path: Path,
    database_url: str | None,
    other_database_url: str | None,
) -> None:
    """End to end through two senders (each its own outbox here: only the budget is shared)."""
    log: list[Sent] = []
    first_url = parse_storage_url(database_url, tmp_path / "first.db")
    second_url = parse_storage_url(other_database_url, tmp_path / "second.db")
    first, first_adapter = await telegram_sender(stack, redis_server, first_url, "first", log)
    second, _ = await telegram_sender(stack, redis_server, second_url, "second", log)

    async def too_many_requests(
        address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        raise DeliveryError("Too Many Requests: retry after 60", retryable=True, retry_after=60.0)

    first_adapter.send = too_many_requests  # type: ignore[method-assign]
    reply = Outgoing(CHAT, Operation.SEND, OutboundText("hello"))
    await first.outbox.enqueue([reply])
    await first.send_due()  # the 429: the chat is paused for every process
    [item_id] = await second.outbox.enqueue([reply])
    started = time.time()
    assert await asyncio.wait_for(second.send_due(), 5.0) == 1  # postponed, not waited for
    assert log == []
    item = await row(second.outbox, item_id)
    assert item.attempts == 0 and item.next_attempt_at > started + 55


async def telegram_sender(
    stack: AsyncExitStack, redis_server: RedisServer, database: StorageUrl, name: str, log: list[Sent]
) -> tuple[OutboxSender, RecordingAdapter]:
    """Process ``name``'s sender to "telegram" on the outbox in ``database``, with the budget shared in
    Redis."""
    storage = await stack.enter_async_context(open_storage(database))
    adapter = RecordingAdapter(name, log)
    adapter.platform = "telegram"
    shared = await budget(stack, redis_server)
    return OutboxSender(Outbox(storage), {"telegram": adapter}, shared, GatewayMetrics()), adapter


async def test_with_redis_down_nothing_is_sent_and_a_429_still_pauses_this_process(
    stack: AsyncExitStack, redis_server: RedisServer, tmp_path: Path, database_url: str | None
) -> None:
    log: list[Sent] = []
    database = parse_storage_url(database_url, tmp_path / "state.db")
    sender, _ = await telegram_sender(stack, redis_server, database, "only", log)
    shared = sender.pacing
    assert isinstance(shared, RedisSendPacing)
    redis_server.halt()
    with pytest.raises(PacingUnavailable):
        await shared.paused_for(CHAT)
    with pytest.raises(PacingUnavailable):
        await shared.wait(CHAT)
    await shared.penalize(CHAT, 30.0)  # not shared, but not lost either
    assert shared._local.pause(CHAT) > 29

    [item_id] = await sender.outbox.enqueue(
        [Outgoing(ChatAddress("telegram", "7"), Operation.SEND, OutboundText("x"))]
    )
    started = time.time()
    await asyncio.wait_for(sender.send_due(), 30.0)
    assert log == []
    item = await row(sender.outbox, item_id)
    assert item.attempts == 0 and item.next_attempt_at > started  # held back, tried again later


async def test_cluster_mode_builds_the_shared_budget_and_a_claimant(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = sending(None, {}, GatewayMetrics())
    assert alone.claimant is None and not isinstance(alone.pacing, RedisSendPacing)
    settings = ClusterSettings(redis_url=redis_server.url, instance_id="gw-1", outbox_claim_ttl=12.0)
    async with open_redis(redis_server.url) as redis:
        cluster = sending(
            Cluster("gw-1", redis, settings, ConnectionWatch(redis, "watch")), {}, GatewayMetrics()
        )
        assert isinstance(cluster.pacing, RedisSendPacing)
        assert cluster.claimant is not None and cluster.claimant.holder.startswith("gw-1:")
        assert cluster.claimant.seconds == 12.0
        assert await cluster.pacing.paused_for(CHAT) == 0.0
