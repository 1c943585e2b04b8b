"""The outbox: every reply is recorded before it is sent and marked sent after.

A reply is queued in the same transaction that marks its inbox row answered, so after a crash either
the message is still pending (and is answered again) or its reply is queued (and is sent): never
neither. The sender (``gateway.sender``) marks a row sent together with the platform's message id.
The one window where a reply can go out twice is between the platform accepting a send and that
single ``UPDATE``; a crash exactly there resends it after the restart.

Contract:

- :meth:`Outbox.enqueue` is atomic: every item and the closing of the inbox row, or nothing. It is not
  idempotent (each call queues new items): a caller retries it only when it raised, which committed
  nothing.
- Each state change (:meth:`~Outbox.mark_sent`, :meth:`~Outbox.reschedule`, ...) is one ``UPDATE`` of
  one row; repeating one repeats its effect (``attempts`` counts again), nothing else.
- Sending is not claimed here: a process sends only the chats it serves (``Served``), and one chat is
  served by one process, so two senders never take the same item.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from adapters.base import ChatAddress, OutboundText, TextEntity
from agent.storage.base import Storage
from agent.storage.schema import outbox
from gateway.inbox import InboxState, finish_row

# What a process delivers: platform -> its only chat, or None for every chat of the platform.
Served = Mapping[str, str | None]


class Operation(StrEnum):
    SEND = "send"
    EDIT = "edit"  # replace the text of ``target_message_id`` (a message streamed during the turn)
    DELETE = "delete"  # remove ``target_message_id`` (a streamed message the final answer no longer needs)


class OutboxState(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"  # given up: counted in gateway_delivery_failures_total and logged


@dataclass(frozen=True)
class Outgoing:
    """One operation to queue."""

    address: ChatAddress
    operation: Operation
    text: OutboundText
    reply_to: str | None = None
    target_message_id: str | None = None


@dataclass(frozen=True)
class OutboxItem:
    id: int
    inbox_id: int | None
    outgoing: Outgoing
    state: OutboxState
    attempts: int
    next_attempt_at: float
    platform_message_id: str | None
    error: str | None


PENDING = outbox.c.state == OutboxState.PENDING.value


class Outbox:
    """The ``outbox`` table."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def enqueue(
        self,
        items: Sequence[Outgoing],
        *,
        inbox_id: int | None = None,
        finish: InboxState | None = None,
    ) -> list[int]:
        """Queue ``items`` in order; when ``finish`` is given, close ``inbox_id`` in the same transaction."""

        def insert(conn: sa.Connection) -> list[int]:
            now = time.time()
            statement = sa.insert(outbox).returning(outbox.c.id)
            ids = [int(conn.execute(statement, _values(item, inbox_id, now)).scalar_one()) for item in items]
            if finish is not None and inbox_id is not None:
                finish_row(conn, inbox_id, finish)
            return ids

        return await self.storage.write(insert)

    async def due_heads(self, now: float, served: Served) -> list[OutboxItem]:
        """The oldest pending item of each chat ``served``, if it is due (a chat's replies go out in
        order). Only this process's chats: another process may serve the others."""
        heads = (
            sa.select(sa.func.min(outbox.c.id).label("id"))
            .where(PENDING, _served(served))
            .group_by(outbox.c.platform, outbox.c.chat_id)
            .subquery()
        )
        query = (
            sa.select(outbox)
            .join(heads, outbox.c.id == heads.c.id)
            .where(outbox.c.next_attempt_at <= now)
            .order_by(outbox.c.id)
        )
        return await self.storage.read(lambda conn: [_item(row) for row in conn.execute(query)])

    async def next_attempt_at(self, served: Served) -> float | None:
        """When the earliest pending item of the chats ``served`` becomes due (None: nothing pending)."""
        query = sa.select(sa.func.min(outbox.c.next_attempt_at)).where(PENDING, _served(served))

        def select(conn: sa.Connection) -> float | None:
            found = conn.execute(query).scalar()
            return None if found is None else float(found)

        return await self.storage.read(select)

    async def pending_count(self, served: Served | None = None) -> int:
        """Pending items (of the chats ``served``, or all)."""
        query = sa.select(sa.func.count()).select_from(outbox).where(PENDING)
        if served is not None:
            query = query.where(_served(served))
        return await self.storage.read(lambda conn: int(conn.execute(query).scalar_one()))

    async def mark_sent(self, item_id: int, platform_message_id: str) -> None:
        await self._update(
            item_id,
            state=OutboxState.SENT.value,
            platform_message_id=platform_message_id,
            sent_at=time.time(),
            attempts=outbox.c.attempts + 1,
        )

    async def reschedule(self, item_id: int, error: str, at: float) -> None:
        await self._update(item_id, attempts=outbox.c.attempts + 1, error=error, next_attempt_at=at)

    async def postpone(self, item_id: int, at: float) -> None:
        """Try ``item_id`` again at ``at`` without counting an attempt (its chat is paused)."""
        await self._update(item_id, next_attempt_at=at)

    async def mark_failed(self, item_id: int, error: str) -> None:
        await self._update(
            item_id, state=OutboxState.FAILED.value, attempts=outbox.c.attempts + 1, error=error
        )

    async def replace(self, item_id: int, outgoing: Outgoing) -> None:
        """Change what a pending item does (plain text after a formatting refusal; a send for a lost edit)."""
        await self._update(
            item_id,
            operation=outgoing.operation.value,
            target_message_id=outgoing.target_message_id,
            text=outgoing.text.text,
            entities=_entities_json(outgoing.text.entities),
        )

    async def items_for(self, inbox_id: int) -> list[OutboxItem]:
        query = sa.select(outbox).where(outbox.c.inbox_id == inbox_id).order_by(outbox.c.id)
        return await self.storage.read(lambda conn: [_item(row) for row in conn.execute(query)])

    async def _update(self, item_id: int, **values: Any) -> None:
        statement = sa.update(outbox).where(outbox.c.id == item_id).values(**values)
        await self.storage.write(lambda conn: conn.execute(statement))


def item_states(conn: sa.Connection, item_ids: Sequence[int]) -> dict[int, tuple[OutboxState, str | None]]:
    """The state and last error of each of ``item_ids`` that exists (for use inside another read)."""
    if not item_ids:
        return {}
    query = sa.select(outbox.c.id, outbox.c.state, outbox.c.error).where(
        outbox.c.id.in_(sorted(set(item_ids)))
    )
    return {int(row.id): (OutboxState(row.state), row.error) for row in conn.execute(query)}


def _served(served: Served) -> sa.ColumnElement[bool]:
    """A condition matching the chats ``served`` (nothing when empty)."""
    clauses = [
        outbox.c.platform == platform
        if chat_id is None
        else sa.and_(outbox.c.platform == platform, outbox.c.chat_id == chat_id)
        for platform, chat_id in sorted(served.items())
    ]
    return sa.or_(sa.false(), *clauses)


def _entities_json(entities: Sequence[TextEntity]) -> str:
    return json.dumps([asdict(entity) for entity in entities], ensure_ascii=False, separators=(",", ":"))


def _values(item: Outgoing, inbox_id: int | None, now: float) -> dict[str, Any]:
    return {
        "inbox_id": inbox_id,
        "platform": item.address.platform,
        "chat_id": item.address.chat_id,
        "thread_id": item.address.thread_id,
        "reply_to": item.reply_to,
        "operation": item.operation.value,
        "target_message_id": item.target_message_id,
        "text": item.text.text,
        "entities": _entities_json(item.text.entities),
        "next_attempt_at": now,
        "created_at": now,
    }


def _item(row: sa.Row[Any]) -> OutboxItem:
    entities = tuple(TextEntity(**entity) for entity in json.loads(row.entities))
    return OutboxItem(
        id=int(row.id),
        inbox_id=None if row.inbox_id is None else int(row.inbox_id),
        outgoing=Outgoing(
            address=ChatAddress(row.platform, row.chat_id, row.thread_id),
            operation=Operation(row.operation),
            text=OutboundText(row.text, entities),
            reply_to=row.reply_to,
            target_message_id=row.target_message_id,
        ),
        state=OutboxState(row.state),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        platform_message_id=row.platform_message_id,
        error=row.error,
    )
