"""The record store an adapter keeps what it must remember in (``adapters.records``): the contract, for
the adapter's own store (in memory) and the gateway's (in the database, the ``storage`` fixture); and
the upgrade that moved Discord's interaction records from their own tables into it, data kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import pytest
import sqlalchemy as sa
from alembic import command

from adapters.discord.interaction_records import RECORDS, InteractionRecord, InteractionRecords, Role
from adapters.records import MemoryRecordStore, RecordsPolicy, RecordStore
from agent.db.base import Storage
from agent.db.migrate import alembic_config, current_revision, head_revision, upgrade
from agent.db.urls import StorageUrl
from gateway.platforms.records import StoredRecords
from tests.storage.test_storage import _unmigrated, empty_database_url  # noqa: F401 - a fixture

KEEP = 100.0
Clock = list[float]


@pytest.fixture(params=["memory", "stored"])
def make_store(request: pytest.FixtureRequest, storage: Storage) -> Callable[[Clock, str], RecordStore]:
    def make(now: Clock, namespace: str = "chat") -> RecordStore:
        policy = RecordsPolicy(keep_after_expiry=KEEP)
        if request.param == "memory":
            return MemoryRecordStore(policy, clock=lambda: now[0])
        return StoredRecords(storage, namespace, policy, clock=lambda: now[0])

    return make


async def test_an_add_keeps_the_first_value_and_a_put_replaces_it(
    make_store: Callable[[Clock, str], RecordStore],
) -> None:
    now = [time.time()]
    store = make_store(now, "chat")
    await store.add("cursor", {"ts": "1.0", "seen": [1, 2]}, expires_at=now[0] + 10)
    await store.add("cursor", {"ts": "2.0"})  # idempotent: the first stays
    first = await store.get("cursor")
    assert first is not None and first.value == {"ts": "1.0", "seen": [1, 2]}
    assert first.expires_at == now[0] + 10
    await store.put("cursor", {"ts": "3.0"})
    replaced = await store.get("cursor")
    assert replaced is not None and (replaced.value, replaced.expires_at) == ({"ts": "3.0"}, None)
    assert await store.get("other") is None


async def test_children_live_and_go_with_their_parent(
    make_store: Callable[[Clock, str], RecordStore],
) -> None:
    now = [time.time()]
    store = make_store(now, "chat")
    await store.add("question:1", {"text": "deploy?"}, expires_at=now[0] + 60)
    await store.add("button:a", {"answer": "yes"}, parent="question:1")
    await store.add("button:b", {"answer": "no"}, parent="question:1")
    await store.add("button:b", {"answer": "changed"}, parent="question:1")  # idempotent
    await store.add("button:c", {"answer": "lost"}, parent="question:2")  # no such parent: not added
    await store.put("question:1", {"text": "deploy now?"}, expires_at=now[0] + 60)  # children stay
    question = await store.get("question:1")
    assert question is not None and question.value == {"text": "deploy now?"}
    assert question.children == {"button:a": {"answer": "yes"}, "button:b": {"answer": "no"}}
    button = await store.get("button:a")
    assert button is not None and button.value == {"answer": "yes"}
    assert await store.get("button:c") is None
    await store.delete("question:1")
    assert await store.get("question:1") is None and await store.get("button:a") is None


async def test_expiry_only_moves_earlier_and_records_are_kept_a_while_past_it(
    make_store: Callable[[Clock, str], RecordStore],
) -> None:
    now = [time.time()]
    store = make_store(now, "chat")
    await store.add("token:1", {"n": 1}, expires_at=now[0] + 50)
    await store.add("answer:1", {"n": 2}, parent="token:1")
    await store.add("forever", {"n": 3})
    await store.expire("token:1", now[0] + 80)  # later: no change
    await store.expire("token:1", now[0] + 10)
    await store.expire("forever", now[0] + 500)  # a record without expiry gets one
    token = await store.get("token:1")
    assert token is not None and token.expires_at == now[0] + 10
    now[0] += 10 + KEEP - 1  # expired, still kept
    await store.add("later", {"n": 4})
    assert await store.get("token:1") is not None and await store.get("answer:1") is not None
    now[0] += 2  # kept long enough: the next add drops it with its child
    await store.add("later still", {"n": 5})
    assert await store.get("token:1") is None and await store.get("answer:1") is None
    assert await store.get("forever") is not None and await store.get("later") is not None


async def test_a_value_that_is_not_a_json_object_is_refused_and_nothing_is_kept(
    make_store: Callable[[Clock, str], RecordStore],
) -> None:
    store = make_store([time.time()], "chat")
    with pytest.raises(ValueError, match="JSON object"):
        await store.add("bad", ["a", "list"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be JSON"):
        await store.put("bad", {"when": time})
    assert await store.get("bad") is None


async def test_each_platform_sees_only_its_own_records(storage: Storage) -> None:
    one = StoredRecords(storage, "one", RecordsPolicy(KEEP))
    two = StoredRecords(storage, "two", RecordsPolicy(KEEP))
    await one.add("key", {"who": "one"})
    await two.add("key", {"who": "two"})
    await two.delete("key")
    kept = await one.get("key")
    assert kept is not None and kept.value == {"who": "one"} and await two.get("key") is None


async def test_an_upgrade_moves_discords_interactions_into_the_record_store_with_their_answers(
    empty_database_url: StorageUrl,  # noqa: F811 - the fixture imported above
) -> None:
    """A database from before revision 0012 had Discord's two tables: a command deferred then is still
    answered in its interaction, privately, after the upgrade."""
    storage = await _unmigrated(empty_database_url)
    expires = time.time() + 600
    try:
        await storage.write(lambda conn: command.upgrade(alembic_config(conn), "0010"))
        await storage.write(partial(_old_rows, expires=expires))
        await storage.write(partial(upgrade, where=storage.description))
        assert await storage.read(current_revision) == head_revision()
        records = InteractionRecords(StoredRecords(storage, "discord", RECORDS))
        found = await records.find("900")
        owner = await records.owner_of("902")
        tables = await storage.read(lambda conn: set(sa.inspect(conn).get_table_names()))
    finally:
        await storage.close()
    assert found == InteractionRecord(
        id="900",
        application_id="77",
        token="interaction-token",
        channel_id="5",
        command="status",
        ephemeral=True,
        deferred=True,
        expires_at=expires,
        messages={"901": Role.ORIGINAL, "902": Role.FOLLOWUP},
    )
    assert owner == found
    assert "adapter_records" in tables
    assert not tables & {"discord_interactions", "discord_interaction_messages"}


def _old_rows(conn: sa.Connection, *, expires: float) -> None:
    """Revision 0003's rows, as the gateway of that time wrote them."""
    conn.execute(
        sa.text(
            "INSERT INTO discord_interactions (id, application_id, token, channel_id, command, ephemeral, "
            "deferred, expires_at, created_at) VALUES ('900', '77', 'interaction-token', '5', 'status', "
            ":yes, :yes, :expires, :created)"
        ),
        {"yes": True, "expires": expires, "created": expires - 870},
    )
    conn.execute(
        sa.text(
            "INSERT INTO discord_interaction_messages (message_id, interaction_id, role) VALUES "
            "('901', '900', 'original'), ('902', '900', 'followup')"
        )
    )
