"""The gateway's repositories on the ``Storage`` seam: their contracts (atomic, idempotent, exclusive),
on an empty migrated database (the ``storage`` fixture), so they run on every database it gives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
import sqlalchemy as sa

import gateway.ledger.outbox as outbox_module
from adapters.base import ChatAddress, ChatType, InboundMessage, OutboundText
from agent.db.base import Storage
from agent.memory import OWNER_SCOPE
from gateway.access.pairing import MAX_PENDING_PER_PLATFORM, Pairing, RequestOutcome
from gateway.cron.jobs import CronJobs, DeliveryState, NewJob, RunStatus
from gateway.ledger.inbox import Inbox, InboxEntry, InboxState, NoLongerPending
from gateway.ledger.outbox import Operation, Outbox, Outgoing

T = TypeVar("T")


def message(message_id: str, chat_id: str = "7", text: str = "hello") -> InboundMessage:
    return InboundMessage(
        platform="telegram",
        chat_id=chat_id,
        chat_type=ChatType.DIRECT,
        user_id=chat_id,
        user_name="Ann",
        message_id=message_id,
        text=text,
        timestamp=1.0,
    )


def entry(message_id: str, chat_id: str = "7") -> InboxEntry:
    return InboxEntry(message(message_id, chat_id), f"telegram:dm:{chat_id}")


def counting_writes(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the write transactions ``storage`` runs from now on."""
    writes: list[int] = []
    write = storage.write

    async def counted(fn: Callable[[sa.Connection], T]) -> T:
        writes.append(1)
        return await write(fn)

    monkeypatch.setattr(storage, "write", counted)
    return writes


# --- inbox ----------------------------------------------------------------------------------------


async def test_a_batch_is_stored_once_and_says_which_messages_were_new(storage: Storage) -> None:
    inbox = Inbox(storage)
    first = await inbox.record(message("1"), "telegram:dm:7")
    assert first is not None and first.state is InboxState.PENDING
    rows = await inbox.record_batch([entry("2"), entry("1"), entry("3", "8"), entry("2"), entry("4")])
    new = [row.message.message_id if row is not None else None for row in rows]
    assert new == ["2", None, "3", None, "4"]  # "1" was stored before, the second "2" is a redelivery
    ids = [row.id for row in rows if row is not None]
    assert ids == sorted(ids) and first.id < ids[0]  # numbered in the batch's order
    assert rows[2] is not None and rows[2].session_key == "telegram:dm:8"
    pending = await inbox.pending()
    assert [row.message.message_id for row in pending] == ["1", "2", "3", "4"]
    assert await inbox.record_batch([entry("1"), entry("4")]) == [None, None]  # a retry stores nothing
    assert await inbox.record_batch([]) == []
    found = await inbox.find("telegram", "8", "3")
    assert found is not None and found.message == message("3", "8")


async def test_a_burst_of_500_messages_is_stored_in_one_transaction(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(How long it takes is measured, not asserted: ``benchmarks/gateway.py --only throughput``.)"""
    inbox = Inbox(storage)
    burst = [entry(str(n), str(n % 40)) for n in range(500)]
    writes = counting_writes(storage, monkeypatch)
    rows = await inbox.record_batch(burst)
    assert len(writes) == 1 and all(row is not None for row in rows)
    assert len(await inbox.pending()) == 500
    assert await inbox.record_batch(burst) == [None] * 500  # the platform delivers the burst again


async def test_overlapping_batches_stored_at_once_store_each_message_once(storage: Storage) -> None:
    """Two processes (or connections) storing the same redelivered updates at the same moment."""
    inbox = Inbox(storage)
    batches = [[entry(str(n)) for n in range(start, start + 60)] for start in (0, 30, 15)]
    results = await asyncio.gather(*(inbox.record_batch(batch) for batch in batches))
    stored = [row.message.message_id for rows in results for row in rows if row is not None]
    assert sorted(stored, key=int) == [str(n) for n in range(90)]  # each once, whoever stored it
    assert len(await inbox.pending()) == 90


async def test_closing_pending_rows_of_some_chats(storage: Storage) -> None:
    inbox = Inbox(storage)
    await inbox.record_batch([entry("1", "a"), entry("2", "b"), entry("3", "c")])
    assert await inbox.cancel_pending("telegram", {"a", "b"}) == 2
    assert await inbox.cancel_pending("telegram", {"a", "b"}) == 0  # idempotent
    assert await inbox.cancel_pending("telegram", set()) == 0
    assert [row.message.chat_id for row in await inbox.pending()] == ["c"]


# --- outbox ---------------------------------------------------------------------------------------


def reply(chat: str, text: str) -> Outgoing:
    return Outgoing(ChatAddress("telegram", chat), Operation.SEND, OutboundText(text))


async def test_a_reply_is_queued_and_its_message_closed_in_one_transaction(storage: Storage) -> None:
    inbox, outbox = Inbox(storage), Outbox(storage)
    row = await inbox.record(message("1"), "telegram:dm:7")
    assert row is not None
    ids = await outbox.enqueue(
        [reply("7", "one"), reply("7", "two")], inbox_id=row.id, finish=InboxState.ANSWERED
    )
    assert ids == sorted(ids) and [i.id for i in await outbox.items_for(row.id)] == ids
    assert await inbox.pending() == []
    closed = await inbox.find("telegram", "7", "1")
    assert closed is not None and closed.state is InboxState.ANSWERED


async def test_a_message_answered_by_another_worker_first_gets_no_second_answer(storage: Storage) -> None:
    """Two workers that both raced past the pending check: the later transaction queues nothing."""
    inbox, outbox = Inbox(storage), Outbox(storage)
    row = await inbox.record(message("1"), "telegram:dm:7")
    assert row is not None
    await outbox.enqueue([reply("7", "first")], inbox_id=row.id, finish=InboxState.ANSWERED)
    with pytest.raises(NoLongerPending):
        await outbox.enqueue([reply("7", "second")], inbox_id=row.id, finish=InboxState.FAILED)
    assert [item.outgoing.text.text for item in await outbox.items_for(row.id)] == ["first"]
    closed = await inbox.find("telegram", "7", "1")
    assert closed is not None and closed.state is InboxState.ANSWERED


async def test_a_failed_enqueue_queues_nothing_and_closes_nothing(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox, outbox = Inbox(storage), Outbox(storage)
    row = await inbox.record(message("1"), "telegram:dm:7")
    assert row is not None

    def closing_fails(conn: sa.Connection, inbox_id: int, state: InboxState) -> None:
        raise RuntimeError("the disk filled up after the replies were inserted")

    monkeypatch.setattr(outbox_module, "finish_row", closing_fails)
    with pytest.raises(RuntimeError):
        await outbox.enqueue(
            [reply("7", "one"), reply("7", "two")], inbox_id=row.id, finish=InboxState.ANSWERED
        )
    assert await outbox.pending_count() == 0 and [r.id for r in await inbox.pending()] == [row.id]


async def test_due_heads_are_the_oldest_pending_item_of_each_served_chat(storage: Storage) -> None:
    outbox = Outbox(storage)
    elsewhere = Outgoing(ChatAddress("discord", "9"), Operation.SEND, OutboundText("x"))
    a1, a2, b1, _ = await outbox.enqueue([reply("a", "1"), reply("a", "2"), reply("b", "1"), elsewhere])
    now = time.time() + 1
    assert [item.id for item in await outbox.due_heads(now, {"telegram": None})] == [a1, b1]
    assert [item.id for item in await outbox.due_heads(now, {"telegram": "b"})] == [b1]
    assert await outbox.due_heads(now, {}) == []
    await outbox.mark_sent(a1, "m1")
    await outbox.postpone(b1, now + 60)
    assert [item.id for item in await outbox.due_heads(now, {"telegram": None})] == [a2]
    assert await outbox.next_attempt_at({"telegram": "b"}) == pytest.approx(now + 60)
    assert await outbox.pending_count({"telegram": None}) == 2 and await outbox.pending_count() == 3


# --- cron jobs ------------------------------------------------------------------------------------


def job(next_run_at: float | None, repeat: int | None = None) -> NewJob:
    target = ChatAddress("telegram", "7")
    return NewJob("digest", "Summarize.", "every 1h", target, "cli:local", OWNER_SCOPE, repeat, next_run_at)


async def test_of_many_claims_of_one_occurrence_exactly_one_wins(storage: Storage) -> None:
    jobs = CronJobs(storage)
    due = await jobs.add(job(time.time() - 5))
    claims = await asyncio.gather(*(jobs.claim(due.id, time.time() + 3600) for _ in range(8)))
    won = [claim for claim in claims if claim is not None]
    assert len(won) == 1 and won[0].last_status is RunStatus.RUNNING
    assert await jobs.claim(due.id, time.time() + 7200) is None  # the next occurrence is not due yet


async def test_the_last_delivery_is_read_from_the_outbox(storage: Storage) -> None:
    jobs, outbox = CronJobs(storage), Outbox(storage)
    added = await jobs.add(job(time.time() - 5))
    first, second = await outbox.enqueue([reply("7", "part 1"), reply("7", "part 2")])
    await jobs.finish(added.id, RunStatus.OK, output="done", delivery=[first, second])
    assert (await jobs.all())[0].delivery is DeliveryState.PENDING
    await outbox.mark_sent(first, "m1")
    await outbox.mark_failed(second, "chat not found")
    failed = await jobs.get(added.id)
    assert failed is not None and failed.delivery is DeliveryState.FAILED
    assert failed.delivery_error == "chat not found"
    await outbox.replace(second, reply("7", "again"))
    [listed] = await jobs.for_chat(ChatAddress("telegram", "7"))
    assert listed.id == added.id and await jobs.for_chat(ChatAddress("telegram", "7", "3")) == []


async def test_a_run_left_running_is_found_once_at_start_up(storage: Storage) -> None:
    jobs = CronJobs(storage)
    due = await jobs.add(job(time.time() - 5, repeat=1))
    claimed = await jobs.claim(due.id, None)
    assert claimed is not None and not claimed.enabled and claimed.repeat == 0  # used up: disabled
    assert await jobs.interrupted_runs() == 1 and await jobs.interrupted_runs() == 0
    interrupted = await jobs.get(due.id)
    assert interrupted is not None and interrupted.last_status is RunStatus.INTERRUPTED


# --- pairing --------------------------------------------------------------------------------------


async def test_concurrent_strangers_never_get_more_codes_than_the_limit(storage: Storage) -> None:
    pairing = Pairing(storage)
    strangers = [str(n) for n in range(MAX_PENDING_PER_PLATFORM + 3)]
    requests = await asyncio.gather(*(pairing.request("discord", s, "X", s) for s in strangers))
    outcomes = [request.outcome for request in requests]
    assert outcomes.count(RequestOutcome.NEW_CODE) == MAX_PENDING_PER_PLATFORM
    assert outcomes.count(RequestOutcome.FULL) == 3
    # Which strangers won a code depends on how the requests interleaved: ask again as one who did.
    holder = next(s for s, r in zip(strangers, requests, strict=True) if r.outcome is RequestOutcome.NEW_CODE)
    again = await asyncio.gather(*(pairing.request("discord", holder, "X", holder) for _ in range(3)))
    assert {request.outcome for request in again} == {RequestOutcome.WAITING}


async def test_a_code_approved_twice_at_once_approves_its_person_once(storage: Storage) -> None:
    pairing = Pairing(storage)
    issued = await pairing.request("telegram", "5", "Bo", "5")
    assert issued.code is not None
    approvals = await asyncio.gather(
        *(pairing.approve("telegram", issued.code.code, "cli") for _ in range(4))
    )
    assert sum(approval is not None for approval in approvals) == 1
    assert [user.user_id for user in await pairing.approved()] == ["5"]
    assert await pairing.revoke("telegram", "5") and not await pairing.revoke("telegram", "5")
