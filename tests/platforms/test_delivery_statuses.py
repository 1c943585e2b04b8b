"""Delivery statuses recorded on the outbox (``gateway.delivery.statuses``): the latest state a platform
reported for each reply, never moved back by one that arrives late, found through an index."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from adapters.base import ChatAddress, DeliveryStatus, OutboundText
from agent.db import Storage
from gateway.delivery.statuses import DeliveryStatuses
from gateway.ledger.outbox import Fates, Operation, Outbox, Outgoing, delivery_update
from gateway.server.metrics import GatewayMetrics
from gateway.tables import outbox as outbox_table

CHAT = "4915112345678"


async def sent_reply(outbox: Outbox, message_id: str) -> None:
    [item_id] = await outbox.enqueue(
        [Outgoing(ChatAddress("whatsapp", CHAT), Operation.SEND, OutboundText(f"reply {message_id}"))]
    )
    assert await outbox.mark_sent(item_id, message_id)


def reported(message_id: str, status: str, error: str | None = None) -> DeliveryStatus:
    return DeliveryStatus("whatsapp", CHAT, message_id, status, error)  # type: ignore[arg-type]


async def test_each_reply_keeps_the_latest_state_its_platform_reported(storage: Storage) -> None:
    """Statuses out of order, repeated, for another chat's message or for a message that is not ours:
    each reply ends with the furthest state reported for it; a failure fails it and is counted once."""
    outbox = Outbox(storage)
    for message_id in ("m1", "m2", "m3", "m4"):
        await sent_reply(outbox, message_id)
    metrics = GatewayMetrics()
    sink = DeliveryStatuses(outbox, metrics)
    await sink([reported("m1", "read"), reported("m1", "delivered"), reported("m2", "sent")])
    await sink([reported("m2", "delivered"), reported("m1", "sent"), reported("m3", "delivered")])
    await sink([reported("m3", "failed", "131026: undeliverable"), reported("m3", "failed", "again")])
    await sink([reported("m4", "read"), reported("m4", "failed", "too late"), reported("gone", "read")])
    other_chat = DeliveryStatus("whatsapp", "4900000000000", "m2", "read")
    await sink([other_chat])

    def rows(conn: sa.Connection) -> dict[str, tuple[str, str | None, str | None, bool]]:
        found = conn.execute(sa.select(outbox_table))
        return {row.platform_message_id: (row.state, row.delivery, row.error, row.delivery_at is not None)
                for row in found}  # fmt: skip

    assert await storage.read(rows) == {
        "m1": ("sent", "read", None, True),
        "m2": ("sent", "delivered", None, True),
        "m3": ("failed", "failed", "131026: undeliverable", True),
        "m4": ("sent", "read", None, True),  # read is final: a failure reported after it is not believed
    }
    assert metrics.registry.get_sample_value("gateway_delivery_failures_total", {"platform": "whatsapp"}) == 1


async def test_a_status_finds_its_reply_through_an_index_not_a_scan(storage: Storage) -> None:
    """The outbox grows with every reply: the query plan of a status's update searches an index."""
    statement = delivery_update(reported("wamid.1", "delivered"), 1.0)

    def plan(conn: sa.Connection) -> str:
        sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if storage.dialect == "sqlite":
            return "\n".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        # An empty table is read whole whatever its indexes; forbid that to see whether one serves.
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        return "\n".join(str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}"))

    found = await storage.write(plan)
    if storage.dialect == "sqlite":
        assert "SEARCH outbox USING INDEX outbox_by_message" in found and "SCAN" not in found, found
    else:
        assert "Index Scan using outbox_by_message" in found and "Seq Scan" not in found, found


def test_an_unknown_status_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown delivery status 'bounced'"):
        delivery_update(reported("m1", "bounced"), 1.0)


async def test_the_day_s_fates_count_only_the_replies_queued_since_then(storage: Storage) -> None:
    outbox = Outbox(storage)
    for message_id in ("old", "new"):
        await sent_reply(outbox, message_id)
    await DeliveryStatuses(outbox, GatewayMetrics())([reported("old", "read"), reported("new", "delivered")])
    day_ago = time.time() - 86_400
    old = outbox_table.c.platform_message_id == "old"
    aged = sa.update(outbox_table).where(old).values(created_at=day_ago - 1)
    await storage.write(lambda conn: conn.execute(aged))
    assert await outbox.fates_since(day_ago) == Fates(replies=1, delivered=1)
    assert await outbox.fates_since(day_ago - 60) == Fates(replies=2, delivered=2, read=1)
