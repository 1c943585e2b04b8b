"""The outbox: every reply is recorded before it is sent and marked sent after.

A reply is queued in the same transaction that marks its inbox row answered, so after a crash either
the message is still pending (and is answered again) or its reply is queued (and is sent): never
neither. The sender (``gateway.delivery.sender``) marks a row sent together with the platform's message id.
The one window where a reply can go out twice is between the platform accepting a send and that
single ``UPDATE``; a crash exactly there resends it after the restart. Every attempt at an item carries
the item's delivery key (:attr:`OutboxItem.key`): a platform that deduplicates by it (Matrix, Discord)
answers the resend with the message it already has, and the person sees one.

Contract:

- :meth:`Outbox.enqueue` is atomic: every item and the closing of the inbox row, or nothing. It is not
  idempotent (each call queues new items): a caller retries it only when it raised, which committed
  nothing.
- Each state change (:meth:`~Outbox.mark_sent`, :meth:`~Outbox.reschedule`, ...) is one ``UPDATE`` of
  one row; repeating one repeats its effect (``attempts`` counts again), nothing else.
- A chat's items go out in order: only its oldest pending item (its head) is ever handed to a sender,
  and an item leaves ``pending`` only for good (sent or failed), so a later item of the chat becomes
  the head only after every earlier one is settled.

Claims (several gateway processes, ``cluster.redis_url``). Every process may send for every chat, so
a sender passes a :class:`Claimant` and each item is sent by the one process that claimed it:

- :meth:`Outbox.due_heads` with a claimant claims the heads it returns in one transaction (``FOR
  UPDATE SKIP LOCKED`` on PostgreSQL: two processes claiming at once take different rows; SQLite's
  single writer needs nothing): it writes ``claimed_by`` (the claimant's name, unique per process
  start) and ``claimed_until``. A head claimed by another process is not returned until that claim
  has expired, so while an item of chat C is claimed and unsent, no process sends a later item of C.
- The claim lasts ``Claimant.seconds`` and is renewed while the attempt runs
  (:meth:`Outbox.keep_claim`, also called right before the platform gets the request); a process that
  dies leaves it to expire.
- A claim of another process found expired is not taken over at once: it is released and the item
  postponed by ``TAKEOVER_GRACE``. Its holder may have had the send accepted and be retrying the write
  that records it (the database was away longer than the claim); that write is retried every 0.1–0.5
  s, so once the database answers, it lands within the grace. After the grace, any process sends the
  item, unless it was recorded sent.
- With a claimant, every state change but :meth:`~Outbox.mark_sent` is a compare-and-set on
  ``claimed_by``: it changes the item only while it is pending and the claimant still holds it, and
  says whether it did. A process whose claim expired can neither change the item nor (checking
  :meth:`~Outbox.keep_claim` right before sending) send it. A send the platform accepted is recorded
  whoever holds the claim by then, as long as the item is pending: it is the truth, and it stops a
  process that has not sent the item yet from sending it. Sent and failed items keep ``claimed_by``
  (who settled them); a retry, a postponement or a replacement releases the claim, so any process may
  try next.
- Expiry compares ``claimed_until`` with the claiming process's clock: the processes' machines keep
  their clocks in sync (NTP), and a skew of s seconds lets a claim be taken over s seconds early.
- The one window where a reply goes out twice stays the one above (the platform accepted, the process
  died or stalled before its ``UPDATE``), now also across processes: a process stalled (SIGSTOP, GC,
  a partition) longer than the claim and the grace between its last check and the platform's answer,
  or one that could not record a send for ``RECORD_PATIENCE`` (``gateway.delivery.sender``).

Without a claimant (one process, SQLite or PostgreSQL) nothing is claimed and the claim columns stay
empty: a process sends only the chats it serves (``Served``), and one chat is served by one process.
Claims there would only add a write per pass, and after a crash a wait for the dead process's claims.

Delivery statuses. A platform with status webhooks later says what became of a message it accepted
(``gateway.delivery.statuses``): :meth:`Outbox.record_deliveries` keeps the latest on the item that
sent it (``delivery``, ``delivery_at``; found by ``platform_message_id`` through the
``outbox_by_message`` index), never moving back (:data:`EARLIER`); a failure also fails the item.

Files. An item may send a file (a spoken reply's voice note: ``Operation.SEND_VOICE``). Its bytes are
stored once, by SHA-256, in the ``media`` table in the same transaction as the item (the item keeps the
hash and what the platform is told about the file), so a restart sends the very bytes that were queued,
made once. The item's text is what to send instead when the platform will not take the file (empty
when the words go out beside it anyway).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from adapters.base import Button, ChatAddress, DeliveryStatus, OutboundText, OutboundVoice, TextEntity
from agent.db import Storage, insert_ignoring_duplicates, media
from gateway.ledger.inbox import InboxState, finish_row
from gateway.tables import outbox

# What a process delivers: platform -> its only chat, or None for every chat of the platform.
Served = Mapping[str, str | None]
# How long an item whose claim expired in another process waits before anyone sends it: ten times the
# longest pause between that process's tries to record a send (see the module docstring).
TAKEOVER_GRACE = 5.0

log = logging.getLogger(__name__)


class Operation(StrEnum):
    SEND = "send"
    EDIT = "edit"  # replace the text of ``target_message_id`` (a message streamed during the turn)
    DELETE = "delete"  # remove ``target_message_id`` (a streamed message the final answer no longer needs)
    SEND_VOICE = "send_voice"  # a voice note (``voice``); ``text``: its words, if the platform refuses it


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
    voice: OutboundVoice | None = None  # SEND_VOICE: None when its stored audio is missing


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
    created_at: float

    @property
    def key(self) -> str:
        """The delivery key every attempt at this item is sent with (:func:`delivery_key`)."""
        return delivery_key(self.id, self.created_at)


def delivery_key(item_id: int, created_at: float) -> str:
    """An item's delivery key (``adapters.base``: Matrix's transaction id, Discord's nonce): its id and
    the microsecond it was queued, in base 36.

    Both are in the item's row, so every attempt sends the same key: from any process of a cluster,
    after a restart, after the database was copied to PostgreSQL. The time tells apart items that share
    an id in different databases, as long as they were not queued in the same microsecond: two bots or
    homes on one Matrix account or Discord bot, a database started afresh or restored from a backup
    (whose items would otherwise reuse keys the platform remembers, and be taken for sent). At most 25
    characters (Discord's limit for a nonce) until the year 2085."""
    return f"{_base36(item_id)}-{_base36(round(created_at * 1_000_000))}"


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, digit = divmod(number, 36)
        text = digits[digit] + text
        if number == 0:
            return text


@dataclass(frozen=True)
class Fates:
    """How the replies queued since a time fared (the console's health page): ``failed`` were given up
    on, ``undelivered`` of them by the platform after it had accepted them (a status); ``delivered``
    and ``read`` as the platform last reported (only platforms with status webhooks report them)."""

    replies: int = 0
    failed: int = 0
    undelivered: int = 0
    delivered: int = 0  # delivered or read
    read: int = 0


@dataclass(frozen=True)
class Claimant:
    """A sender among several processes: the name it writes into the items it claims (unique per
    process start, so a restarted process never mistakes an old claim for its own) and how long a
    claim lasts unless it is renewed."""

    holder: str
    seconds: float


# Written as a literal, not a bound value: only then may the database use the indexes kept of pending
# items alone (``outbox_pending``, ``outbox_pending_by_chat``), whatever the size of the outbox.
PENDING = outbox.c.state == sa.literal_column(f"'{OutboxState.PENDING.value}'")
# When a pending item may be tried: its next attempt, or the end of its claim if that is later.
DUE_AT = sa.case(
    (outbox.c.claimed_until > outbox.c.next_attempt_at, outbox.c.claimed_until),
    else_=outbox.c.next_attempt_at,
)
# Built once: it runs for every reply (building a statement per call cost more than running it).
_PENDING_FOR = (
    sa.select(sa.func.count())
    .select_from(outbox)
    .where(
        PENDING,
        outbox.c.platform == sa.bindparam("chat_platform"),
        outbox.c.chat_id == sa.bindparam("chat"),
    )
)
# The delivery statuses each one replaces (``outbox.delivery``): never an earlier by a later-arriving
# one, so a late "sent" after "read" changes nothing. Read and failed are both final: the first stays.
EARLIER: Mapping[str, tuple[str, ...]] = {
    "sent": (),
    "delivered": ("sent",),
    "read": ("sent", "delivered"),
    "failed": ("sent", "delivered"),
}
RELEASED: dict[str, Any] = {"claimed_by": None, "claimed_until": None}  # anyone may try the item next
SETTLED: dict[str, Any] = {"claimed_until": None}  # claimed_by stays: who sent it, or gave up on it


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
            ids = insert_items(conn, items, inbox_id=inbox_id)
            if finish is not None and inbox_id is not None:
                finish_row(conn, inbox_id, finish)
            return ids

        return await self.storage.write(insert)

    async def pending_for(self, address: ChatAddress) -> int:
        """Items of ``address``'s chat not sent yet (its replies go out in order: these come first)."""
        parameters = {"chat_platform": address.platform, "chat": address.chat_id}
        return await self.storage.read(lambda conn: int(conn.execute(_PENDING_FOR, parameters).scalar_one()))

    async def due_heads(
        self, now: float, served: Served, *, claimant: Claimant | None = None, limit: int | None = None
    ) -> list[OutboxItem]:
        """The oldest pending item of each chat ``served``, if it is due (a chat's replies go out in
        order), at most ``limit`` of them. Only this process's chats: another process may serve the
        others. With ``claimant``: only heads nobody else holds a live claim on, claimed for it."""
        query = sa.select(outbox).where(outbox.c.id.in_(_heads(served)), outbox.c.next_attempt_at <= now)
        query = query.order_by(outbox.c.id).limit(limit)
        if claimant is None:
            return await self.storage.read(lambda conn: _items(conn, conn.execute(query).all()))
        claimable = sa.or_(
            outbox.c.claimed_until.is_(None),
            outbox.c.claimed_until <= now,
            outbox.c.claimed_by == claimant.holder,
        )
        locked = query.where(claimable).with_for_update(skip_locked=True, of=outbox)

        def claim(conn: sa.Connection) -> list[OutboxItem]:
            rows = conn.execute(locked).all()
            expired = [row for row in rows if row.claimed_by not in (None, claimant.holder)]
            if expired:
                _grant_grace(conn, expired, now)
            items = _items(conn, [row for row in rows if row.claimed_by in (None, claimant.holder)])
            if items:
                claimed = {"claimed_by": claimant.holder, "claimed_until": now + claimant.seconds}
                ids = [item.id for item in items]
                conn.execute(sa.update(outbox).where(outbox.c.id.in_(ids)).values(**claimed))
            return items

        return await self.storage.write(claim)

    async def keep_claim(self, item_id: int, claimant: Claimant, now: float) -> bool:
        """Extend ``claimant``'s claim on ``item_id`` to ``claimant.seconds`` from ``now``; False when
        the item is no longer pending or another process took it over (then do not send it)."""
        return await self._update(item_id, claimant, claimed_until=now + claimant.seconds)

    async def next_attempt_at(self, served: Served) -> float | None:
        """When the earliest head of the chats ``served`` becomes due, or its claim ends if that is
        later (None: nothing pending)."""
        query = sa.select(sa.func.min(DUE_AT)).where(outbox.c.id.in_(_heads(served)))

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

    async def fates_since(self, since: float) -> Fates:
        """How the replies (sends, not edits or deletions) queued since ``since`` fared; the age index
        finds them, so the count costs what a day's replies cost."""
        messages = (Operation.SEND.value, Operation.SEND_VOICE.value)
        query = (
            sa.select(outbox.c.state, outbox.c.delivery, sa.func.count())
            .where(outbox.c.created_at >= since, outbox.c.operation.in_(messages))
            .group_by(outbox.c.state, outbox.c.delivery)
        )
        rows = await self.storage.read(lambda conn: [tuple(row) for row in conn.execute(query)])
        failed = OutboxState.FAILED.value
        return Fates(
            replies=sum(number for _, _, number in rows),
            failed=sum(number for state, _, number in rows if state == failed),
            undelivered=sum(number for _, delivery, number in rows if delivery == "failed"),
            delivered=sum(number for _, delivery, number in rows if delivery in ("delivered", "read")),
            read=sum(number for _, delivery, number in rows if delivery == "read"),
        )

    # The state changes below: with ``claimant``, only while it still holds the item (see the module
    # docstring), except mark_sent; each returns whether the item was changed.

    async def mark_sent(
        self, item_id: int, platform_message_id: str, *, claimant: Claimant | None = None
    ) -> bool:
        """Record a send the platform accepted, while the item is pending, even if ``claimant``'s claim
        expired meanwhile (the module docstring says why); False when it was settled already."""
        settler = {} if claimant is None else {"claimed_by": claimant.holder}
        return await self._update(
            item_id,
            claimant,
            holding=False,
            state=OutboxState.SENT.value,
            platform_message_id=platform_message_id,
            sent_at=time.time(),
            attempts=outbox.c.attempts + 1,
            **SETTLED,
            **settler,
        )

    async def reschedule(
        self, item_id: int, error: str, at: float, *, claimant: Claimant | None = None
    ) -> bool:
        return await self._update(
            item_id, claimant, attempts=outbox.c.attempts + 1, error=error, next_attempt_at=at, **RELEASED
        )

    async def postpone(self, item_id: int, at: float, *, claimant: Claimant | None = None) -> bool:
        """Try ``item_id`` again at ``at`` without counting an attempt (its chat is paused)."""
        return await self._update(item_id, claimant, next_attempt_at=at, **RELEASED)

    async def record_deliveries(self, statuses: Sequence[DeliveryStatus], at: float) -> list[bool]:
        """What platforms later said about messages they accepted (status webhooks), received at ``at``,
        in one transaction: each is recorded on the item that sent its message unless that item has a
        later one already (:data:`EARLIER`); a failure also fails the sent item, with why. Says for each
        whether it changed an item (False: a late or repeated status, or not one of ours)."""
        statements = [delivery_update(status, at) for status in statuses]
        return await self.storage.write(
            lambda conn: [conn.execute(statement).rowcount > 0 for statement in statements]
        )

    async def mark_failed(self, item_id: int, error: str, *, claimant: Claimant | None = None) -> bool:
        return await self._update(
            item_id,
            claimant,
            state=OutboxState.FAILED.value,
            attempts=outbox.c.attempts + 1,
            error=error,
            **SETTLED,
        )

    async def replace(self, item_id: int, outgoing: Outgoing, *, claimant: Claimant | None = None) -> bool:
        """Change what a pending item does (plain text after a formatting refusal; a send for a lost edit)."""
        return await self._update(
            item_id,
            claimant,
            operation=outgoing.operation.value,
            target_message_id=outgoing.target_message_id,
            text=outgoing.text.text,
            entities=_entities_json(outgoing.text.entities),
            **RELEASED,
        )

    async def find(self, item_id: int) -> OutboxItem | None:
        query = sa.select(outbox).where(outbox.c.id == item_id)

        def select(conn: sa.Connection) -> OutboxItem | None:
            row = conn.execute(query).first()
            return None if row is None else _items(conn, [row])[0]

        return await self.storage.read(select)

    async def items_for(self, inbox_id: int) -> list[OutboxItem]:
        query = sa.select(outbox).where(outbox.c.inbox_id == inbox_id).order_by(outbox.c.id)
        return await self.storage.read(lambda conn: _items(conn, conn.execute(query).all()))

    async def _update(
        self, item_id: int, claimant: Claimant | None, *, holding: bool = True, **values: Any
    ) -> bool:
        """One ``UPDATE`` of ``item_id``; with ``claimant``, only while the item is pending and (unless
        ``holding`` is False) the claimant still holds it."""
        statement = sa.update(outbox).where(outbox.c.id == item_id).values(**values)
        if claimant is not None:
            statement = statement.where(PENDING)
            if holding:
                statement = statement.where(outbox.c.claimed_by == claimant.holder)
        return await self.storage.write(lambda conn: conn.execute(statement).rowcount > 0)


def delivery_update(status: DeliveryStatus, at: float) -> sa.Update:
    """The ``UPDATE`` that records ``status`` on the item that sent its message (found through the
    ``outbox_by_message`` index), unless the item has a later status already."""
    earlier = EARLIER.get(status.status)
    if earlier is None:
        raise ValueError(f"unknown delivery status {status.status!r}: expected one of {', '.join(EARLIER)}")
    statement = sa.update(outbox).where(
        outbox.c.platform == status.platform,
        outbox.c.platform_message_id == status.message_id,
        outbox.c.chat_id == status.chat_id,
        sa.or_(outbox.c.delivery.is_(None), *([outbox.c.delivery.in_(earlier)] if earlier else [])),
    )
    if status.status == "failed":
        failed = {"state": OutboxState.FAILED.value, "error": status.error or "failed"}
        statement = statement.where(outbox.c.state == OutboxState.SENT.value).values(**failed)
    return statement.values(delivery=status.status, delivery_at=at)


def insert_items(conn: sa.Connection, items: Sequence[Outgoing], *, inbox_id: int | None = None) -> list[int]:
    """Queue ``items`` in order inside the caller's transaction (what :meth:`Outbox.enqueue` does; for a
    change that must be said in the same transaction, such as an approval and its welcome)."""
    now = time.time()
    statement = sa.insert(outbox).returning(outbox.c.id)
    ids = []
    for item in items:
        values = _values(item, inbox_id, now)
        if item.voice is not None:
            values |= _store_voice(conn, item.voice, now)
        ids.append(int(conn.execute(statement, values).scalar_one()))
    return ids


VOICE_TYPE = "audio/ogg"


def _store_voice(conn: sa.Connection, voice: OutboundVoice, now: float) -> dict[str, Any]:
    """Store a voice note's bytes once (by SHA-256); the item's columns that name it."""
    sha256 = hashlib.sha256(voice.data).hexdigest()
    row = {"sha256": sha256, "media_type": VOICE_TYPE, "size": len(voice.data), "data": voice.data}
    insert_ignoring_duplicates(conn, media, {**row, "created_at": now})
    meta = {"duration": voice.duration, "waveform": base64.b64encode(voice.waveform).decode("ascii")}
    return {"media_sha256": sha256, "media_meta": json.dumps(meta, separators=(",", ":"))}


def item_states(conn: sa.Connection, item_ids: Sequence[int]) -> dict[int, tuple[OutboxState, str | None]]:
    """The state and last error of each of ``item_ids`` that exists (for use inside another read)."""
    if not item_ids:
        return {}
    query = sa.select(outbox.c.id, outbox.c.state, outbox.c.error).where(
        outbox.c.id.in_(sorted(set(item_ids)))
    )
    return {int(row.id): (OutboxState(row.state), row.error) for row in conn.execute(query)}


def _grant_grace(conn: sa.Connection, expired: Sequence[sa.Row[Any]], now: float) -> None:
    """Release claims another process let expire and postpone their items by ``TAKEOVER_GRACE``."""
    for row in expired:
        log.warning(
            "outbox item %d: the claim of %s ran out; sending it in %.0f s unless that process "
            "records it sent meanwhile",
            row.id,
            row.claimed_by,
            TAKEOVER_GRACE,
        )
    ids = [row.id for row in expired]
    grace = {"next_attempt_at": now + TAKEOVER_GRACE, **RELEASED}
    conn.execute(sa.update(outbox).where(outbox.c.id.in_(ids)).values(**grace))


def _heads(served: Served) -> sa.Select[tuple[Any]]:
    """The id of the oldest pending item of each chat ``served``."""
    return (
        sa.select(sa.func.min(outbox.c.id))
        .where(PENDING, _served(served))
        .group_by(outbox.c.platform, outbox.c.chat_id)
    )


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
        "buttons": _buttons_json(item.text.buttons),
        "next_attempt_at": now,
        "created_at": now,
    }


def _items(conn: sa.Connection, rows: Sequence[sa.Row[Any]]) -> list[OutboxItem]:
    """Rows as items, with the bytes of the files they send (one query for all of them)."""
    hashes = sorted({row.media_sha256 for row in rows if row.media_sha256})
    files: dict[str, bytes] = {}
    if hashes:
        found = conn.execute(sa.select(media.c.sha256, media.c.data).where(media.c.sha256.in_(hashes)))
        files = {found_row.sha256: bytes(found_row.data) for found_row in found}
    return [_item(row, files) for row in rows]


def _buttons_json(buttons: Sequence[Button]) -> str:
    return json.dumps([asdict(button) for button in buttons], ensure_ascii=False, separators=(",", ":"))


def _voice(row: sa.Row[Any], files: Mapping[str, bytes]) -> OutboundVoice | None:
    data = files.get(row.media_sha256 or "")
    if data is None:
        return None
    meta = json.loads(row.media_meta or "{}")
    return OutboundVoice(data, float(meta.get("duration", 0.0)), base64.b64decode(meta.get("waveform", "")))


def _item(row: sa.Row[Any], files: Mapping[str, bytes]) -> OutboxItem:
    entities = tuple(TextEntity(**entity) for entity in json.loads(row.entities))
    operation = Operation(row.operation)
    buttons = tuple(Button(**button) for button in json.loads(row.buttons))
    return OutboxItem(
        id=int(row.id),
        inbox_id=None if row.inbox_id is None else int(row.inbox_id),
        outgoing=Outgoing(
            address=ChatAddress(row.platform, row.chat_id, row.thread_id),
            operation=operation,
            text=OutboundText(row.text, entities, buttons),
            reply_to=row.reply_to,
            target_message_id=row.target_message_id,
            voice=_voice(row, files) if operation is Operation.SEND_VOICE else None,
        ),
        state=OutboxState(row.state),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        platform_message_id=row.platform_message_id,
        error=row.error,
        created_at=row.created_at,
    )
