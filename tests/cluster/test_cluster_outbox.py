"""Several senders on one PostgreSQL outbox (one per simulated process): each reply sent by exactly one
of them, each chat's replies in order, a dead sender's claim taken over after the claim time and a
grace, a sender whose claim was taken over does not send the reply, and one whose send the platform
accepted records it even after its claim ran out (nobody sends it again)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.base import Adapter, Capabilities, ChatAddress, InboundSink, OutboundText
from adapters.text.markdown import render_markdown
from agent.db.connect import open_storage
from agent.db.errors import StorageUnavailable
from agent.db.urls import parse_storage_url
from gateway import tables as schema
from gateway.cluster.counting.pacing import RedisSendPacing
from gateway.delivery import sender as sender_module
from gateway.delivery.pacing import LocalSendPacing
from gateway.delivery.sender import OutboxSender
from gateway.home import HeraldHome
from gateway.ledger.outbox import TAKEOVER_GRACE, Claimant, Operation, Outbox, OutboxState, Outgoing
from gateway.server.metrics import GatewayMetrics
from resilience.backoff import Backoff
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import FRIEND, telegram_gateway
from tests.redis_server import RedisServer

pytestmark = pytest.mark.own_database  # a cluster runs on PostgreSQL whatever --storage says
SETTLE_TIMEOUT = 30.0


@dataclass(frozen=True)
class Sent:
    process: str
    chat: str
    text: str


class RecordingAdapter(Adapter):
    """One process's adapter: appends every send to a log all processes share; ``gate``, when set, holds
    each send until it is opened (a send the platform is slow to accept)."""

    platform = "test"
    capabilities = Capabilities(100, "chars", render_markdown, True, False)

    def __init__(self, process: str, log: list[Sent], gate: asyncio.Event | None = None) -> None:
        self.process = process
        self.log = log
        self.gate = gate
        self.started = asyncio.Event()

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0.002)  # a request takes a little while: the processes overlap
        self.log.append(Sent(self.process, address.chat_id, text.text))
        return f"{self.process}-{len(self.log)}"

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        raise AssertionError("only sends are queued here")

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        raise AssertionError("only sends are queued here")

    async def typing(self, address: ChatAddress) -> None:
        pass


class GatedBudget(LocalSendPacing):
    """A budget whose ``wait`` returns only once ``opened`` is set (a send held up before it goes out)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()
        self.opened = asyncio.Event()

    async def wait(self, address: ChatAddress) -> None:
        self.waiting.set()
        await self.opened.wait()


@dataclass
class Process:
    name: str
    outbox: Outbox
    sender: OutboxSender
    claimant: Claimant
    adapter: RecordingAdapter


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as opened:
        yield opened


async def process(
    stack: AsyncExitStack,
    url: str,
    tmp_path: Path,
    name: str,
    log: list[Sent],
    *,
    claim_seconds: float = 30.0,
    budget: LocalSendPacing | None = None,
    gate: asyncio.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> Process:
    """One simulated gateway process: its own connections to the database, outbox, sender and adapter."""
    storage = await stack.enter_async_context(open_storage(parse_storage_url(url, tmp_path / "unused.db")))
    outbox = Outbox(storage)
    adapter = RecordingAdapter(name, log, gate)
    claimant = Claimant(f"{name}:start", claim_seconds)
    sender = OutboxSender(
        outbox,
        {"test": adapter},
        budget or LocalSendPacing(),
        GatewayMetrics(),
        claimant=claimant,
        clock=clock,
    )
    return Process(name, outbox, sender, claimant, adapter)


def send(chat: str, text: str) -> Outgoing:
    return Outgoing(ChatAddress("test", chat), Operation.SEND, OutboundText(text))


async def row(outbox: Outbox, item_id: int) -> sa.Row[Any]:
    query = sa.select(schema.outbox).where(schema.outbox.c.id == item_id)
    return await outbox.storage.read(lambda conn: conn.execute(query).one())


async def until(condition: Callable[[], Any], timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError("not reached in time")
        await asyncio.sleep(0.02)


async def test_three_senders_send_every_reply_once_in_chat_order_and_share_the_work(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    processes = [await process(stack, postgresql_database, tmp_path, f"p{n}", log) for n in range(3)]
    chats, per_chat = 60, 4  # more chats than one sender claims at a time (CLAIM_BATCH)
    for chat in range(chats):  # one answer of several parts per chat, as a turn queues it
        await processes[chat % 3].outbox.enqueue(
            [send(f"c{chat}", f"c{chat}-{part}") for part in range(per_chat)]
        )
    running = [asyncio.create_task(p.sender.run()) for p in processes]
    try:
        await until(lambda: _nothing_pending(processes[0].outbox))
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    texts = [sent.text for sent in log]
    assert sorted(texts) == sorted(f"c{chat}-{part}" for chat in range(chats) for part in range(per_chat))
    assert len(texts) == len(set(texts))  # each exactly once
    for chat in range(chats):
        assert [s.text for s in log if s.chat == f"c{chat}"] == [
            f"c{chat}-{part}" for part in range(per_chat)
        ]
    by_process = {p.name: sum(1 for s in log if s.process == p.name) for p in processes}
    assert sum(1 for count in by_process.values() if count > 0) >= 2, by_process  # spread over the senders
    holders = await processes[0].outbox.storage.read(
        lambda conn: {r.claimed_by for r in conn.execute(sa.select(schema.outbox.c.claimed_by))}
    )
    assert holders <= {p.claimant.holder for p in processes}  # each row names the process that sent it


async def _nothing_pending(outbox: Outbox) -> bool:
    return await outbox.pending_count() == 0


async def test_a_reply_whose_sender_died_holding_its_claim_is_sent_by_another_after_the_claim_time(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    later = [0.0]  # how far the survivor's clock is ahead: the claim time passing without a sleep
    dead = await process(stack, postgresql_database, tmp_path, "dead", log, claim_seconds=10.0)
    survivor = await process(
        stack, postgresql_database, tmp_path, "survivor", log, clock=lambda: time.time() + later[0]
    )
    first, _ = await dead.outbox.enqueue([send("a", "one"), send("a", "two")])
    await dead.outbox.enqueue([send("b", "other chat")])
    [claimed] = await dead.outbox.due_heads(time.time(), {"test": "a"}, claimant=dead.claimant)
    assert claimed.id == first  # ... and then the process died before sending it

    await survivor.sender.send_due()
    assert [s.text for s in log] == ["other chat"]  # chat a's head is claimed: nothing of chat a goes out

    later[0] = 11.0  # past the dead process's claim: released, and due after the grace
    await survivor.sender.send_due()
    assert [s.text for s in log] == ["other chat"]
    later[0] = 11.0 + TAKEOVER_GRACE
    await survivor.sender.send_due()
    assert [s.text for s in log] == ["other chat", "one", "two"]
    assert {s.process for s in log} == {"survivor"}
    assert (await row(survivor.outbox, first)).claimed_by == survivor.claimant.holder
    assert await survivor.sender.send_due() == 0  # nothing is sent twice
    assert not await dead.outbox.mark_sent(first, "late", claimant=dead.claimant)
    assert (await row(survivor.outbox, first)).platform_message_id == "survivor-2"


async def test_a_sender_whose_claim_was_taken_over_does_not_send_the_reply(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    held_up = GatedBudget()  # the send waits in the budget, then the process stalls past its claim
    stalled = await process(
        stack, postgresql_database, tmp_path, "stalled", log, claim_seconds=5.0, budget=held_up
    )
    later = [6.0]
    other = await process(
        stack, postgresql_database, tmp_path, "other", log, clock=lambda: time.time() + later[0]
    )
    [item_id] = await stalled.outbox.enqueue([send("a", "the answer")])
    attempt = asyncio.create_task(stalled.sender.send_due())
    await asyncio.wait_for(held_up.waiting.wait(), 10.0)

    await other.sender.send_due()  # the claim expired: released for the grace
    held_up.opened.set()
    await asyncio.wait_for(attempt, 10.0)
    assert log == []  # the stalled process checked its claim and held back
    later[0] = 6.0 + TAKEOVER_GRACE
    await other.sender.send_due()

    assert log == [Sent("other", "a", "the answer")]
    stored = await row(other.outbox, item_id)
    assert (stored.state, stored.claimed_by) == (OutboxState.SENT, other.claimant.holder)


async def test_a_send_accepted_after_the_claim_ran_out_is_recorded_and_not_sent_again(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    slow_platform = asyncio.Event()
    stalled = await process(
        stack, postgresql_database, tmp_path, "stalled", log, claim_seconds=60.0, gate=slow_platform
    )
    later = [61.0]
    other = await process(
        stack, postgresql_database, tmp_path, "other", log, clock=lambda: time.time() + later[0]
    )
    [item_id] = await stalled.outbox.enqueue([send("a", "the answer")])
    attempt = asyncio.create_task(stalled.sender.send_due())
    await asyncio.wait_for(stalled.adapter.started.wait(), 10.0)  # the request is with the platform

    await other.sender.send_due()  # the stalled process's claim ran out: released for the grace
    slow_platform.set()
    await asyncio.wait_for(attempt, 10.0)  # the platform took it: recorded though the claim is gone
    later[0] = 61.0 + TAKEOVER_GRACE
    await other.sender.send_due()

    assert log == [Sent("stalled", "a", "the answer")]
    stored = await row(other.outbox, item_id)
    assert (stored.state, stored.claimed_by) == (OutboxState.SENT, stalled.claimant.holder)
    assert (stored.platform_message_id, stored.attempts) == ("stalled-1", 1)
    assert not await stalled.outbox.keep_claim(item_id, stalled.claimant, time.time())


async def test_a_send_recorded_after_the_database_was_away_longer_than_the_claim_goes_out_once(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The platform accepted the reply, then the database went away for longer than the claim; another
    process reached the database first once it was back. Its sender waits the grace, the first
    process's retried write lands meanwhile, and the reply goes out once (it went out twice before)."""
    log: list[Sent] = []
    monkeypatch.setattr(sender_module, "RECORDING", Backoff(0.01, 0.02))
    sender_proc = await process(stack, postgresql_database, tmp_path, "sender", log, claim_seconds=10.0)
    later = [11.0]
    other = await process(
        stack, postgresql_database, tmp_path, "other", log, clock=lambda: time.time() + later[0]
    )
    back, refused = asyncio.Event(), asyncio.Event()
    real_mark_sent = sender_proc.outbox.mark_sent

    async def mark_sent_once_back(*args: Any, **kwargs: Any) -> bool:
        if not back.is_set():
            refused.set()
            raise StorageUnavailable("the database cannot be reached")
        return await real_mark_sent(*args, **kwargs)

    monkeypatch.setattr(sender_proc.outbox, "mark_sent", mark_sent_once_back)
    [item_id] = await sender_proc.outbox.enqueue([send("a", "the answer")])
    attempt = asyncio.create_task(sender_proc.sender.send_due())
    await asyncio.wait_for(refused.wait(), 10.0)  # sent, and its record refused

    await other.sender.send_due()  # the database answers the other process first: the claim ran out
    assert log == [Sent("sender", "a", "the answer")]
    back.set()
    await asyncio.wait_for(attempt, 10.0)
    later[0] = 11.0 + TAKEOVER_GRACE
    await other.sender.send_due()

    assert log == [Sent("sender", "a", "the answer")]
    stored = await row(other.outbox, item_id)
    assert (stored.state, stored.platform_message_id) == (OutboxState.SENT, "sender-1")


async def test_a_live_sender_keeps_its_claim_while_the_platform_is_slow(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    slow_platform = asyncio.Event()
    busy = await process(
        stack, postgresql_database, tmp_path, "busy", log, claim_seconds=1.5, gate=slow_platform
    )
    other = await process(stack, postgresql_database, tmp_path, "other", log)
    [item_id] = await busy.outbox.enqueue([send("a", "the answer")])
    attempt = asyncio.create_task(busy.sender.send_due())
    await asyncio.wait_for(busy.adapter.started.wait(), 10.0)
    assert b"gateway_outbox_claims 1.0" in busy.sender.metrics.render()
    first = float((await row(busy.outbox, item_id)).claimed_until)

    async def past_the_first_claim() -> bool:  # it would have run out by now, had it not been renewed
        return time.time() > first and float((await row(busy.outbox, item_id)).claimed_until) > first

    await until(past_the_first_claim)
    await other.sender.send_due()  # nobody else takes the item
    slow_platform.set()
    await asyncio.wait_for(attempt, 10.0)
    assert log == [Sent("busy", "a", "the answer")]
    assert (await row(busy.outbox, item_id)).state == OutboxState.SENT
    assert b"gateway_outbox_claims 0.0" in busy.sender.metrics.render()


async def test_the_head_of_a_chat_claimed_elsewhere_is_due_when_its_claim_ends(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    first = await process(stack, postgresql_database, tmp_path, "first", log, claim_seconds=20.0)
    await first.outbox.enqueue([send("a", "one"), send("a", "two")])
    now = time.time()
    await first.outbox.due_heads(now, {"test": None}, claimant=first.claimant)
    next_at = await first.outbox.next_attempt_at({"test": None})
    assert next_at is not None and next_at == pytest.approx(now + 20.0)  # not "now": no busy loop meanwhile


async def test_a_gateway_in_cluster_mode_answers_through_a_claim_and_the_shared_budget(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    postgresql_database: str,
    redis_server: RedisServer,
) -> None:
    emulator.script(Reply(text="Hello from the cluster"))
    cluster = {"redis_url": redis_server.url, "instance_id": "gw-1"}
    async with telegram_gateway(  # not streamed: the answer goes out through the outbox, under a claim
        home,
        emulator,
        emulator_url,
        storage={"url": postgresql_database},
        cluster=cluster,
        gateway={"stream_edit_interval": 0},
    ) as harness:
        harness.fake.private_message(FRIEND, "Hi")
        await harness.settled()
        assert harness.texts(FRIEND) == ["Hello from the cluster"]
        services = harness.gateway.services
        assert isinstance(services.pacing, RedisSendPacing)
        holders = await services.outbox.storage.read(
            lambda conn: {r.claimed_by for r in conn.execute(sa.select(schema.outbox.c.claimed_by))}
        )
        assert {holder.split(":")[0] for holder in holders} == {"gw-1"}
        metrics = services.metrics.render()
    assert b"gateway_outbox_claims 0.0" in metrics


async def test_a_process_shutting_down_in_a_cluster_leaves_others_claims_to_them(
    stack: AsyncExitStack, postgresql_database: str, tmp_path: Path
) -> None:
    log: list[Sent] = []
    holder = await process(stack, postgresql_database, tmp_path, "holder", log)
    leaving = await process(stack, postgresql_database, tmp_path, "leaving", log)
    await holder.outbox.enqueue([send("a", "held elsewhere")])
    await holder.outbox.due_heads(time.time(), {"test": None}, claimant=holder.claimant)
    await leaving.outbox.enqueue([send("b", "its own answer")])
    assert await leaving.sender.flush(10.0)  # sent what it could, holds nothing: done
    assert log == [Sent("leaving", "b", "its own answer")]
