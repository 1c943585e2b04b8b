"""The contract of Discord's interaction records, over both record stores: the adapter's own (in memory)
and the one the gateway gives it (in the database, the ``storage`` fixture)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from adapters.discord.interaction_records import (
    KEEP_AFTER_EXPIRY,
    RECORDS,
    InteractionRecord,
    InteractionRecords,
    Role,
)
from adapters.records import MemoryRecordStore
from agent.db.base import Storage
from gateway.platforms.records import StoredRecords

Clock = list[float]


@pytest.fixture(params=["memory", "stored"])
def make_records(request: pytest.FixtureRequest, storage: Storage) -> Callable[[Clock], InteractionRecords]:
    def make(now: Clock) -> InteractionRecords:
        if request.param == "memory":
            return InteractionRecords(MemoryRecordStore(RECORDS, clock=lambda: now[0]))
        return InteractionRecords(StoredRecords(storage, "discord", RECORDS, clock=lambda: now[0]))

    return make


def record(interaction_id: str, expires_at: float, *, ephemeral: bool = False) -> InteractionRecord:
    return InteractionRecord(
        id=interaction_id,
        application_id="99",
        token=f"token-{interaction_id}",
        channel_id="5",
        command="status",
        ephemeral=ephemeral,
        deferred=True,
        expires_at=expires_at,
    )


async def test_a_record_keeps_its_facts_and_its_answers(
    make_records: Callable[[Clock], InteractionRecords],
) -> None:
    now = [time.time()]
    records = make_records(now)
    first = record("1", now[0] + 870, ephemeral=True)
    await records.remember(first)
    await records.remember(record("1", now[0] + 5))  # idempotent: the first record stays
    await records.add_message("1", "101", Role.ORIGINAL)
    await records.add_message("1", "102", Role.FOLLOWUP)
    await records.add_message("1", "102", Role.FOLLOWUP)  # idempotent
    found = await records.find("1")
    assert found is not None and found == InteractionRecord(
        **{**first.__dict__, "messages": {"101": Role.ORIGINAL, "102": Role.FOLLOWUP}}
    )
    assert (
        found.answerable(now[0])
        and found.message(Role.ORIGINAL) == "101"
        and found.message(Role.NOTICE) is None
    )
    owner = await records.owner_of("102")
    assert owner is not None and owner.id == "1"
    assert await records.owner_of("103") is None and await records.find("2") is None


async def test_expiry_only_moves_earlier_and_records_outlive_it_for_a_while(
    make_records: Callable[[Clock], InteractionRecords],
) -> None:
    now = [time.time()]
    records = make_records(now)
    await records.remember(record("1", now[0] + 870))
    await records.add_message("1", "101", Role.NOTICE)
    await records.expire("1", now[0] - 1)
    await records.expire("1", now[0] + 100)  # later than it already is: no change
    expired = await records.find("1")
    assert expired is not None and expired.expires_at == now[0] - 1 and not expired.answerable(now[0])
    now[0] += KEEP_AFTER_EXPIRY - 10  # still known: a late answer to a private command stays private
    await records.remember(record("2", now[0] + 870))
    assert await records.owner_of("101") is not None
    now[0] += 20
    await records.remember(record("3", now[0] + 870))  # kept long enough: dropped, with its messages
    assert await records.find("1") is None and await records.owner_of("101") is None
    assert await records.find("2") is not None and await records.find("3") is not None
