"""The inbox: every addressed message from an authorized person, stored before it is confirmed.

``record`` is the first thing the router does with a message it will act on; the adapter confirms the
message to the platform only after that returned (adapters/base.py). A row stays ``pending`` until
its answer is queued in the outbox (in the same transaction), so a restart answers exactly the
messages that never got one.

Contract:

- :meth:`Inbox.record_batch` stores a batch of messages in one transaction: all of them or none. It is
  idempotent: the unique key ``(platform, chat_id, message_id)`` turns a platform's redelivery (or a
  caller's retry after an error) into a no-op, reported as "not new", also when another process stored
  the message first. A caller may retry a batch that raised; nothing is stored twice. (On PostgreSQL,
  two transactions storing the same messages in different orders can deadlock: the database aborts
  one, which then raised having stored nothing.)
- :func:`finish_row` closes a row inside the caller's transaction (the outbox queues the answer in it),
  and only a pending one: a row another worker closed first raises :class:`NoLongerPending`, which
  rolls that transaction back, so a message's answer is queued once whoever races for it.
- :meth:`Inbox.set_stream_message` and :meth:`Inbox.cancel_pending` are single statements (idempotent).
- Who wrote in a chat (``chat_people``, the console's "People") is added in the transaction that stores
  their first new message there; :data:`PEOPLE_PER_CHAT` counts them per chat (session key).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from adapters.base import Attachment, ChatType, InboundMessage
from agent.db import Storage, insert_for
from gateway.tables import chat_people, inbox

BATCH_ROWS = 1000  # rows per INSERT statement: 6 parameters each, far below either database's limit


class NoLongerPending(Exception):
    """The stored message was answered (or closed) by someone else first: a worker that finds this
    drops its work (``gateway.intake.pending``, :func:`finish_row`)."""

    def __init__(self, inbox_id: int) -> None:
        super().__init__(f"inbox {inbox_id} is no longer pending")
        self.inbox_id = inbox_id


class InboxState(StrEnum):
    PENDING = "pending"  # stored, not answered yet (a restart answers it)
    ANSWERED = "answered"  # the answer (or a command's reply) is in the outbox
    FAILED = "failed"  # the turn failed for good; the user was told so (the outbox has that line)
    CANCELLED = "cancelled"  # /stop or a newer message interrupted it; nothing more will be sent
    REFUSED = "refused"  # over a spend limit: no model request (the chat is told once per window)


@dataclass(frozen=True)
class InboxEntry:
    """A message to store, with the session key it belongs to."""

    message: InboundMessage
    session_key: str


@dataclass(frozen=True)
class InboxRow:
    id: int
    session_key: str
    message: InboundMessage
    state: InboxState
    stream_message_id: str | None
    received_at: float


def message_to_json(message: InboundMessage) -> str:
    return json.dumps(dataclasses.asdict(message), ensure_ascii=False, separators=(",", ":"))


def message_from_json(raw: str) -> InboundMessage:
    data: dict[str, Any] = json.loads(raw)
    data["chat_type"] = ChatType(data["chat_type"])
    data["attachments"] = tuple(Attachment(**item) for item in data.get("attachments", ()))
    return InboundMessage(**data)


Key = tuple[str, str, str]  # (platform, chat_id, message_id): the unique key

# Statements run for every message, built once: building one per call cost more than running it, on
# the event loop (building) and the database thread (its cache key).
_GET = sa.select(inbox).where(inbox.c.id == sa.bindparam("row_id"))
_SET_STREAM_MESSAGE = (
    sa.update(inbox)
    .where(inbox.c.id == sa.bindparam("row_id"))
    .values(stream_message_id=sa.bindparam("stream_message"))
)
_FINISH = (
    sa.update(inbox)
    .where(inbox.c.id == sa.bindparam("row_id"), inbox.c.state == InboxState.PENDING.value)
    .values(state=sa.bindparam("new_state"), finished_at=sa.bindparam("finished"))
)


def _key(message: InboundMessage) -> Key:
    return message.platform, message.chat_id, message.message_id


class Inbox:
    """The ``inbox`` table."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def record(self, message: InboundMessage, session_key: str) -> InboxRow | None:
        """Store ``message``; None when it was stored before (a redelivery: do nothing more)."""
        [row] = await self.record_batch([InboxEntry(message, session_key)])
        return row

    async def record_batch(self, entries: Sequence[InboxEntry]) -> list[InboxRow | None]:
        """Store ``entries`` in one transaction; for each, its new row, or None when that message was
        stored before (by an earlier delivery, or earlier in this batch). New rows are numbered in the
        order of ``entries`` (both databases number a multi-row ``INSERT`` in order), so
        :meth:`pending` gives them back in that order."""
        if not entries:
            return []

        def insert(conn: sa.Connection) -> list[InboxRow | None]:
            now = time.time()
            first: dict[Key, int] = {}  # each message's first place in the batch
            for index, entry in enumerate(entries):
                first.setdefault(_key(entry.message), index)
            ids: dict[Key, int] = {}
            for chunk in _chunks([entries[index] for index in first.values()], BATCH_ROWS):
                statement = (
                    insert_for(conn, inbox)
                    .values([_values(entry, now) for entry in chunk])
                    .on_conflict_do_nothing(index_elements=["platform", "chat_id", "message_id"])
                    .returning(inbox.c.id, inbox.c.platform, inbox.c.chat_id, inbox.c.message_id)
                )
                for row in conn.execute(statement):
                    ids[(row.platform, row.chat_id, row.message_id)] = int(row.id)
            rows: list[InboxRow | None] = []
            for index, entry in enumerate(entries):
                key = _key(entry.message)
                new = first[key] == index and key in ids
                rows.append(_new_row(ids[key], entry, now) if new else None)
            people = {(row.session_key, row.message.user_id) for row in rows if row is not None}
            # In one order everywhere: two transactions adding the same people never wait for each other.
            found = [{"session_key": k, "user_id": u, "first_seen": now} for k, u in sorted(people)]
            for start in range(0, len(found), BATCH_ROWS):
                some = found[start : start + BATCH_ROWS]
                conn.execute(insert_for(conn, chat_people).values(some).on_conflict_do_nothing())
            return rows

        return await self.storage.write(insert)

    async def pending(self) -> list[InboxRow]:
        """Rows without an answer, oldest first (what a restart must still answer)."""
        query = sa.select(inbox).where(inbox.c.state == InboxState.PENDING.value).order_by(inbox.c.id)
        return await self.storage.read(lambda conn: [_row(row) for row in conn.execute(query)])

    async def pending_count(self) -> int:
        """Rows without an answer (the console's health page)."""
        query = sa.select(sa.func.count()).select_from(inbox).where(inbox.c.state == InboxState.PENDING.value)
        return await self.storage.read(lambda conn: int(conn.execute(query).scalar_one()))

    async def pending_of(self, session_key: str, up_to: int) -> list[InboxRow]:
        """The rows of one chat without an answer, with ids up to ``up_to``, oldest first (a cluster's
        workers answer a chat's oldest message first: ``gateway.cluster.queue.chat_order``)."""
        query = (
            sa.select(inbox)
            .where(
                inbox.c.state == InboxState.PENDING.value,
                inbox.c.session_key == session_key,
                inbox.c.id <= up_to,
            )
            .order_by(inbox.c.id)
        )
        return await self.storage.read(lambda conn: [_row(row) for row in conn.execute(query)])

    async def get(self, inbox_id: int) -> InboxRow | None:
        """The row ``inbox_id`` (queued work names its message by this id)."""
        parameters = {"row_id": inbox_id}
        return await self.storage.read(
            lambda conn: next((_row(row) for row in conn.execute(_GET, parameters)), None)
        )

    async def find(self, platform: str, chat_id: str, message_id: str) -> InboxRow | None:
        """The row of one platform message, if it was stored."""
        query = sa.select(inbox).where(
            inbox.c.platform == platform, inbox.c.chat_id == chat_id, inbox.c.message_id == message_id
        )

        def select(conn: sa.Connection) -> InboxRow | None:
            row = conn.execute(query).first()
            return _row(row) if row is not None else None

        return await self.storage.read(select)

    async def set_stream_message(self, inbox_id: int, message_id: str) -> None:
        """Remember the message being edited while the answer streams, so a rerun reuses it."""
        parameters = {"row_id": inbox_id, "stream_message": message_id}
        await self.storage.write(lambda conn: conn.execute(_SET_STREAM_MESSAGE, parameters))

    async def cancel_pending(self, platform: str, chat_ids: Collection[str]) -> int:
        """Close the pending rows of these chats without answering them (the lines of a terminal that
        has exited are not answered by the next one); returns how many."""
        if not chat_ids:
            return 0
        statement = (
            sa.update(inbox)
            .where(
                inbox.c.state == InboxState.PENDING.value,
                inbox.c.platform == platform,
                inbox.c.chat_id.in_(sorted(chat_ids)),
            )
            .values(state=InboxState.CANCELLED.value, finished_at=time.time())
        )
        return await self.storage.write(lambda conn: int(conn.execute(statement).rowcount or 0))


# People who wrote in each chat, per session key (the console joins it to its chat list; it may narrow it
# to some chats with a WHERE on its session_key before making it a subquery).
PEOPLE_PER_CHAT = sa.select(chat_people.c.session_key, sa.func.count().label("people")).group_by(
    chat_people.c.session_key
)


def finish_row(conn: sa.Connection, inbox_id: int, state: InboxState) -> None:
    """Mark a pending row finished; for use inside a transaction that also queues its reply. Raises
    :class:`NoLongerPending` (rolling the transaction back) when the row was closed already."""
    parameters = {"row_id": inbox_id, "new_state": state.value, "finished": time.time()}
    closed = conn.execute(_FINISH, parameters)
    if not closed.rowcount:
        raise NoLongerPending(inbox_id)


def _values(entry: InboxEntry, now: float) -> dict[str, Any]:
    message = entry.message
    return {
        "platform": message.platform,
        "chat_id": message.chat_id,
        "message_id": message.message_id,
        "session_key": entry.session_key,
        "message": message_to_json(message),
        "received_at": now,
    }


def _chunks(items: Sequence[InboxEntry], size: int) -> Iterator[Sequence[InboxEntry]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _new_row(inbox_id: int, entry: InboxEntry, now: float) -> InboxRow:
    return InboxRow(inbox_id, entry.session_key, entry.message, InboxState.PENDING, None, now)


def _row(row: sa.Row[Any]) -> InboxRow:
    return InboxRow(
        id=int(row.id),
        session_key=row.session_key,
        message=message_from_json(row.message),
        state=InboxState(row.state),
        stream_message_id=row.stream_message_id,
        received_at=row.received_at,
    )
