"""The outbox sender against an adapter that fails on cue: retries, fallbacks, order, and no silence."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.base import (
    Adapter,
    Capabilities,
    ChatAddress,
    DeliveryError,
    InboundSink,
    OutboundText,
    TextEntity,
)
from adapters.text.markdown import render_markdown
from agent.db.base import Storage
from agent.db.errors import StorageUnavailable
from agent.db.fencing import FencedOut
from agent.events import TextDelta
from gateway import tables as schema
from gateway.delivery import sender as sender_module
from gateway.delivery.pacing import LocalSendPacing
from gateway.delivery.sender import OutboxSender
from gateway.delivery.stream import ReplyStream
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Operation, Outbox, OutboxState, Outgoing, delivery_key
from gateway.server.metrics import GatewayMetrics
from resilience.backoff import Backoff
from resilience.cancelling import cancel_and_wait
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until, wait_until_awaited


class ScriptedAdapter(Adapter):
    """Records operations; raises the queued errors first."""

    platform = "test"
    capabilities = Capabilities(100, "chars", render_markdown, True, False)

    def __init__(self) -> None:
        self.errors: list[DeliveryError] = []
        self.sent: list[tuple[str, str, OutboundText]] = []  # (operation, chat, text)
        self.keys: list[str | None] = []  # the key of every attempt, refused ones too
        self.counter = 0

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        pass

    async def stop(self) -> None:
        pass

    def _maybe_fail(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        self.keys.append(key)
        self._maybe_fail()
        self.counter += 1
        self.sent.append(("send", address.chat_id, text))
        return f"m{self.counter}"

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        self.keys.append(key)
        self._maybe_fail()
        self.sent.append(("edit", address.chat_id, text))

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        self._maybe_fail()
        self.sent.append(("delete", address.chat_id, OutboundText(message_id)))

    async def typing(self, address: ChatAddress) -> None:
        pass


@pytest.fixture
def outbox(storage: Storage) -> Outbox:
    return Outbox(storage)


async def stored(outbox: Outbox, item_id: int) -> sa.Row[Any]:
    """The item's row as it is in the database."""
    query = sa.select(schema.outbox).where(schema.outbox.c.id == item_id)
    return await outbox.storage.read(lambda conn: conn.execute(query).one())


def send(chat: str, text: str, entities: tuple[TextEntity, ...] = ()) -> Outgoing:
    return Outgoing(ChatAddress("test", chat), Operation.SEND, OutboundText(text, entities))


def make_sender(
    outbox: Outbox, adapter: ScriptedAdapter
) -> tuple[OutboxSender, GatewayMetrics, LocalSendPacing]:
    metrics, budget = GatewayMetrics(), LocalSendPacing()
    return OutboxSender(outbox, {"test": adapter}, budget, metrics), metrics, budget


async def test_replies_of_a_chat_go_out_in_order_and_are_marked_sent(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    sender, metrics, _ = make_sender(outbox, adapter)
    await outbox.enqueue([send("a", "one"), send("b", "other chat"), send("a", "two")])
    await sender.send_due()
    assert [t.text for op, chat, t in adapter.sent if chat == "a"] == ["one", "two"]
    assert await outbox.pending_count() == 0
    assert b"gateway_messages_out_total" in metrics.render()


async def test_a_rejected_format_is_resent_as_plain_text(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    adapter.errors.append(DeliveryError("can't parse entities", formatting=True))
    sender, _, _ = make_sender(outbox, adapter)
    [item_id] = await outbox.enqueue([send("a", "bold", (TextEntity("bold", 0, 4),))])
    await sender.send_due()
    await sender.send_due()
    assert adapter.sent == [("send", "a", OutboundText("bold"))]
    assert await outbox.pending_count() == 0 and item_id


async def test_every_attempt_at_a_reply_carries_its_one_key_and_the_next_reply_another(
    outbox: Outbox,
) -> None:
    """The key a platform deduplicates by (``adapters.base``) stays the reply's through a formatting
    refusal, its plain-text resend, a failure tried again later and a restart; the next reply, with the
    very same words, has its own (Matrix and Discord would otherwise show only the first)."""
    adapter = ScriptedAdapter()
    adapter.errors += [
        DeliveryError("can't parse entities", formatting=True),
        DeliveryError("timed out", retryable=True),
    ]
    first, second = await outbox.enqueue([send("a", "bold", (TextEntity("bold", 0, 4),)), send("a", "bold")])
    now = time.time()
    before = OutboxSender(outbox, {"test": adapter}, LocalSendPacing(), GatewayMetrics(), clock=lambda: now)
    await before.send_due()  # refused formatting: plain text next
    await before.send_due()  # timed out: tried again later
    now += sender_module.MAX_BACKOFF
    after = OutboxSender(outbox, {"test": adapter}, LocalSendPacing(), GatewayMetrics(), clock=lambda: now)
    await after.send_due()  # the next process
    keys = [(await outbox.find(item_id)).key for item_id in (first, second)]  # type: ignore[union-attr]
    assert adapter.keys == [keys[0], keys[0], keys[0], keys[1]] and keys[0] != keys[1]
    assert [text.text for _, _, text in adapter.sent] == ["bold", "bold"]


def test_a_delivery_key_is_short_and_tells_apart_the_same_id_queued_in_another_database() -> None:
    key = delivery_key(7, 1_767_225_600.123456)
    assert key == delivery_key(7, 1_767_225_600.123456)
    assert key != delivery_key(7, 1_767_225_600.123457)  # a bot sharing the account, a fresh database
    assert key != delivery_key(8, 1_767_225_600.123456)
    longest = delivery_key(2**63 - 1, 3_600_000_000.0)  # the largest id, in the year 2084
    assert len(longest) <= 25 and re.fullmatch(r"[0-9a-z-]+", longest)  # Discord's nonce


async def test_a_429_waits_the_platforms_time_and_holds_back_the_chats_later_replies(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    adapter.errors.append(DeliveryError("Too Many Requests", retryable=True, retry_after=1.0))
    sender, metrics, budget = make_sender(outbox, adapter)
    await outbox.enqueue([send("a", "first"), send("a", "second")])
    await sender.send_due()
    assert adapter.sent == [] and await budget.paused_for(ChatAddress("test", "a")) > 0
    assert await sender.flush(WAIT_TIMEOUT)
    assert [t.text for _, _, t in adapter.sent] == ["first", "second"]
    assert b'gateway_rate_limited_total{platform="test"} 1.0' in metrics.render()


async def test_a_chat_that_is_gone_fails_loudly_and_others_go_on(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    adapter.errors.append(DeliveryError("Forbidden: bot was blocked by the user", permanent=True))
    sender, metrics, _ = make_sender(outbox, adapter)
    await outbox.enqueue([send("blocked", "hello"), send("fine", "hello")])
    await sender.send_due()
    assert [chat for _, chat, _ in adapter.sent] == ["fine"]
    assert b'gateway_delivery_failures_total{platform="test"} 1.0' in metrics.render()
    assert await outbox.pending_count() == 0


async def test_an_edit_of_a_vanished_message_becomes_a_new_message(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    adapter.errors.append(DeliveryError("message to edit not found", permanent=True))
    sender, _, _ = make_sender(outbox, adapter)
    edit = Outgoing(ChatAddress("test", "a"), Operation.EDIT, OutboundText("final"), target_message_id="m9")
    await outbox.enqueue([edit])
    await sender.flush(WAIT_TIMEOUT)
    assert adapter.sent == [("send", "a", OutboundText("final"))]


async def test_an_adapter_bug_is_retried_not_fatal(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    sender, _, _ = make_sender(outbox, adapter)
    original = adapter.send
    calls = 0

    async def flaky(
        address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("adapter bug")
        return await original(address, text, reply_to=reply_to, key=key)

    adapter.send = flaky  # type: ignore[method-assign]
    await outbox.enqueue([send("a", "x")])
    task = asyncio.create_task(sender.run())
    try:
        await wait_until(lambda: adapter.sent, what="the retried send")
    finally:
        await cancel_and_wait([task])  # its pass may be mid-query: let it give its connection back
    assert calls == 2


async def test_a_reply_the_platform_refuses_is_given_up_and_counted(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    adapter.errors.extend(DeliveryError("bad request: message is too long") for _ in range(3))
    sender, metrics, _ = make_sender(outbox, adapter)
    [item_id] = await outbox.enqueue([send("a", "x")])
    await sender.send_due()
    row = await stored(outbox, item_id)
    assert row.state == OutboxState.FAILED and "too long" in row.error
    assert b'gateway_delivery_failures_total{platform="test"} 1.0' in metrics.render()


async def test_a_sender_leaves_other_platforms_replies_to_their_own_process(outbox: Outbox) -> None:
    adapter = ScriptedAdapter()
    sender, _, _ = make_sender(outbox, adapter)
    elsewhere = Outgoing(ChatAddress("discord", "9"), Operation.SEND, OutboundText("for discord"))
    await outbox.enqueue([elsewhere, send("a", "for us")])
    await sender.send_due()
    assert [t.text for _, _, t in adapter.sent] == ["for us"]
    assert await outbox.pending_count() == 1 and await outbox.pending_count({"test": None}) == 0


async def test_a_long_pause_postpones_the_chat_instead_of_blocking_the_sender_or_a_shutdown(
    outbox: Outbox,
) -> None:
    adapter = ScriptedAdapter()
    sender, _, budget = make_sender(outbox, adapter)
    await budget.penalize(ChatAddress("test", "a"), 120.0)
    item_id, _ = await outbox.enqueue([send("a", "later"), send("b", "now")])
    started = time.time()
    assert not await asyncio.wait_for(sender.flush(1.0), WAIT_TIMEOUT)  # at its deadline, not in 120 s
    assert [chat for _, chat, _ in adapter.sent] == ["b"]
    row = await stored(outbox, item_id)
    assert row.state == "pending" and row.attempts == 0 and row.next_attempt_at > started + 100


class SlowTyping(ScriptedAdapter):
    """A typing indicator whose request lasts until ``answered`` is set, counting how each call ended."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = asyncio.Event()
        self.typing_started = 0
        self.typing_finished = 0
        self.typing_cancelled = 0

    async def typing(self, address: ChatAddress) -> None:
        self.typing_started += 1
        try:
            await self.answered.wait()
        except asyncio.CancelledError:
            self.typing_cancelled += 1
            raise
        self.typing_finished += 1


async def test_a_typing_request_in_flight_when_the_answer_is_ready_is_let_finish(outbox: Outbox) -> None:
    """Cancelling an HTTP request mid-flight can lose its pooled connection (encode/httpcore#1093);
    enough of those and the bot can send nothing, so the typing indicator is never cancelled."""
    adapter = SlowTyping()
    stream = ReplyStream(
        adapter,
        ChatAddress("test", "c"),
        reply_to=None,
        pacing=LocalSendPacing(),
        interval=0,
        inbox=Inbox(outbox.storage),
        inbox_id=1,
    )
    async with stream:
        await wait_until(lambda: adapter.typing_started, what="the first typing call in flight")
        # The answer is ready while that call is in flight; its request completes once the stream
        # has stopped typing (a cancelled call would already be cancelled by then).
        asyncio.get_running_loop().call_soon(adapter.answered.set)
    assert (adapter.typing_finished, adapter.typing_cancelled) == (1, 0)


class SlowButSure(ScriptedAdapter):
    """Sends last until ``accepted`` is set and, as the adapter contract requires, finish even if the
    caller gives up."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted = asyncio.Event()
        self.began = 0

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        self.began += 1

        async def slowly() -> str:
            await self.accepted.wait()
            return await ScriptedAdapter.send(self, address, text, reply_to=reply_to, key=key)

        return await asyncio.shield(asyncio.ensure_future(slowly()))


async def test_a_send_still_in_flight_at_the_flush_deadline_is_recorded_and_never_sent_again(
    outbox: Outbox,
) -> None:
    adapter = SlowButSure()
    sender, _, _ = make_sender(outbox, adapter)
    await outbox.enqueue([send("a", "the answer")])
    assert not await sender.flush(2.0)  # the shutdown's deadline passes mid-send
    assert adapter.began == 1
    # the next pass, while that send is still in flight, does not try it a second time (without the
    # guard it would begin another send and wait on it: the timeout only bounds that failure)
    assert await asyncio.wait_for(sender.send_due(), 30) == 0 and adapter.began == 1
    adapter.accepted.set()  # the platform accepts it after all

    async def recorded() -> bool:  # as sent, so a restart does not send it again
        return await outbox.pending_count() == 0

    await wait_until_awaited(recorded, what="the send recorded")
    assert await sender.send_due() == 0
    assert [text.text for _, _, text in adapter.sent] == ["the answer"]


async def test_a_database_error_in_a_pass_does_not_end_the_sender(
    outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = ScriptedAdapter()
    sender, _, _ = make_sender(outbox, adapter)
    monkeypatch.setattr(sender_module, "PASS_RETRY", 0.05)
    real_due_heads = outbox.due_heads
    failures = iter([StorageUnavailable("the database cannot be reached")])

    async def flaky_due_heads(*args: Any, **kwargs: Any) -> Any:
        for failure in failures:
            raise failure
        return await real_due_heads(*args, **kwargs)

    monkeypatch.setattr(outbox, "due_heads", flaky_due_heads)
    await outbox.enqueue([send("a", "still delivered")])
    running = asyncio.create_task(sender.run())
    try:
        await wait_until(lambda: adapter.sent, what="the send after the failed pass")
    finally:
        await cancel_and_wait([running])  # its pass may be mid-query: let it give its connection back
    assert [text.text for _, _, text in adapter.sent] == ["still delivered"]


async def test_a_send_recorded_while_the_database_is_away_is_recorded_when_it_is_back_and_not_sent_again(
    outbox: Outbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram took the reply, then PostgreSQL went away before the sender could mark it sent (a
    loaded chaos run showed it: the pass failed, and the reply went out a second time once the
    database was back). The send is recorded when the database answers again, and made once."""
    adapter = ScriptedAdapter()
    sender, _, _ = make_sender(outbox, adapter)
    monkeypatch.setattr(sender_module, "PASS_RETRY", 0.05)
    monkeypatch.setattr(sender_module, "RECORDING", Backoff(0.01, 0.02))
    real_mark_sent = outbox.mark_sent
    away = iter([StorageUnavailable("the database cannot be reached")] * 3)

    async def away_for_a_while(*args: Any, **kwargs: Any) -> Any:
        for failure in away:
            raise failure
        return await real_mark_sent(*args, **kwargs)

    monkeypatch.setattr(outbox, "mark_sent", away_for_a_while)
    [item_id] = await outbox.enqueue([send("a", "once")])
    running = asyncio.create_task(sender.run())
    try:

        async def recorded() -> bool:
            return bool((await stored(outbox, item_id)).state == OutboxState.SENT.value)

        await wait_until_awaited(recorded, what="the send recorded")
        await outbox.enqueue([send("b", "a later reply")])  # a later pass: the first is not sent again
        await wait_until(lambda: len(adapter.sent) >= 2, what="the later reply sent")
    finally:
        await cancel_and_wait([running])  # its pass may be mid-query: let it give its connection back
    assert (await stored(outbox, item_id)).platform_message_id == "m1"
    assert [text.text for _, _, text in adapter.sent] == ["once", "a later reply"]


async def test_a_chat_waiting_for_its_first_reply_s_retry_is_not_due_before_it(outbox: Outbox) -> None:
    """The later parts of an answer wait behind the first: the sender sleeps until the retry time
    instead of waking again and again for parts it may not send yet."""
    first, _ = await outbox.enqueue([send("a", "part 1"), send("a", "part 2")])
    retry_at = time.time() + 60
    await outbox.reschedule(first, "Too Many Requests", retry_at)
    assert await outbox.next_attempt_at({"test": None}) == pytest.approx(retry_at)


class FencedInbox(Inbox):
    """Another process took the session over while the first streamed send was in flight."""

    async def set_stream_message(self, inbox_id: int, message_id: str) -> None:
        raise FencedOut("test:chat:c", 1, 2)


async def test_a_streamed_message_the_store_refused_to_record_is_taken_back_when_the_turn_fails(
    outbox: Outbox,
) -> None:
    """Whoever answers instead never learnt of that message: left alone it would stay half-written."""
    adapter = ScriptedAdapter()
    address = ChatAddress("test", "c")
    stream = ReplyStream(
        adapter,
        address,
        reply_to=None,
        pacing=LocalSendPacing(),
        interval=0.01,
        inbox=FencedInbox(outbox.storage),
        inbox_id=1,
    )
    with pytest.raises(FencedOut):
        async with stream:
            await stream.on_event(TextDelta("The first words"))
            raise FencedOut("test:chat:c", 1, 2)  # the turn's next write
    assert [(operation, text.text) for operation, _, text in adapter.sent] == [
        ("send", "The first words"),
        ("delete", "m1"),
    ]
