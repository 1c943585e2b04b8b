"""DM pairing: an unknown person who writes to the bot directly gets a one-time code for an admin.

Codes are 8 characters from an alphabet without look-alikes, expire after an hour, at most 3 wait per
platform, and a person gets a new code at most every 10 minutes. An admin approves with
``herald pairing approve PLATFORM CODE`` or ``/approve CODE``; approvals live in the database and
survive restarts. Codes are compared in constant time.

Contract:

- :meth:`Pairing.request` issues at most one live code per person and at most
  :data:`MAX_PENDING_PER_PLATFORM` per platform, also when several processes handle strangers at once:
  the decision is made again inside the transaction that issues the code, and on PostgreSQL that
  transaction first takes a lock per platform (:func:`~agent.db.sql.serialize`), so two issuers
  never decide from the same stale count. Retrying after an error is safe (nothing was issued).
- :meth:`Pairing.approve` consumes a code exactly once: of two admins approving the same code at once,
  one gets the person and the other None (so the person is welcomed once). Approving twice is
  idempotent in effect (the second finds no code). The welcome is queued in the outbox in the same
  transaction as the approval: the person can write (and be answered) only once it is queued, so it
  is never said after their first answer (``gateway.delivery.stream`` streams nothing before what a chat's
  outbox holds).
- :meth:`Pairing.deny` consumes a code like an approval does, approving nobody (the operator console's
  "deny"); :meth:`Pairing.revoke` is idempotent.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from adapters.base import ChatAddress, OutboundText
from agent.db import Storage, serialize, upsert
from gateway.ledger.outbox import Operation, Outgoing, insert_items
from gateway.tables import approved_users, pairing_codes

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = 3600.0
NEW_CODE_EVERY = 600.0
MAX_PENDING_PER_PLATFORM = 3


class RequestOutcome(StrEnum):
    NEW_CODE = "new_code"  # tell the person their code
    WAITING = "waiting"  # they already have a recent code: stay quiet
    FULL = "full"  # too many people waiting on this platform: tell them to try later


@dataclass(frozen=True)
class PairingCode:
    code: str
    platform: str
    user_id: str
    user_name: str
    chat_id: str  # the direct chat to tell them in once approved
    created_at: float
    expires_at: float


@dataclass(frozen=True)
class ApprovedUser:
    platform: str
    user_id: str
    user_name: str
    chat_id: str
    approved_at: float
    approved_by: str


@dataclass(frozen=True)
class PairingRequest:
    outcome: RequestOutcome
    code: PairingCode | None = None


WELCOME = "You're in: the owner approved your access. Say hello whenever you like."


def welcome(user: ApprovedUser) -> Outgoing:
    """The message that tells an approved person (queued with their approval)."""
    return Outgoing(ChatAddress(user.platform, user.chat_id), Operation.SEND, OutboundText(WELCOME))


def new_code(choose: Callable[[str], str] = secrets.choice) -> str:
    return "".join(choose(ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What a person typed, as a code: upper case, no spaces or dashes."""
    return "".join(text.split()).replace("-", "").upper()


class Pairing:
    """Pairing codes and approved people."""

    def __init__(self, storage: Storage, *, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock

    async def request(self, platform: str, user_id: str, user_name: str, chat_id: str) -> PairingRequest:
        """An unknown person wrote in a direct chat: issue a code if the rules allow one.

        Only issuing a code writes: a stranger who keeps writing while their code is fresh (or while
        the platform's codes are all taken) costs one read, never the write lock turns need.
        """
        now = self.clock()
        known = await self.storage.read(lambda conn: _without_new_code(conn, platform, user_id, now))
        if known is not None:
            return known

        def issue(conn: sa.Connection) -> PairingRequest:
            serialize(conn, f"pairing:{platform}")
            now = self.clock()
            decided = _without_new_code(conn, platform, user_id, now)  # again, inside the transaction
            if decided is not None:
                return decided
            conn.execute(sa.delete(pairing_codes).where(pairing_codes.c.expires_at <= now))
            conn.execute(
                sa.delete(pairing_codes).where(
                    pairing_codes.c.platform == platform, pairing_codes.c.user_id == user_id
                )
            )
            code = PairingCode(new_code(), platform, user_id, user_name, chat_id, now, now + CODE_TTL)
            conn.execute(sa.insert(pairing_codes).values(**asdict(code)))
            return PairingRequest(RequestOutcome.NEW_CODE, code)

        return await self.storage.write(issue)

    async def approve(self, platform: str, typed: str, approved_by: str) -> ApprovedUser | None:
        """Approve the person whose live code matches ``typed`` and queue their welcome (a sender sends
        it: wake one); None when no code matches."""
        wanted = normalize_code(typed)

        def approve(conn: sa.Connection) -> ApprovedUser | None:
            now = self.clock()
            match = _consume(conn, platform, wanted, now)
            if match is None:
                return None
            user = ApprovedUser(platform, match.user_id, match.user_name, match.chat_id, now, approved_by)
            upsert(conn, approved_users, asdict(user), ["platform", "user_id"])
            insert_items(conn, [welcome(user)])
            return user

        return await self.storage.write(approve)

    async def deny(self, platform: str, typed: str) -> PairingCode | None:
        """Withdraw the live code ``typed`` without approving anyone: the person whose code it was, or
        None when no code matches. The person may ask again later (a new code, under the usual rules)."""
        wanted = normalize_code(typed)
        return await self.storage.write(lambda conn: _consume(conn, platform, wanted, self.clock()))

    async def is_approved(self, platform: str, user_id: str) -> bool:
        query = sa.select(sa.literal(1)).where(
            approved_users.c.platform == platform, approved_users.c.user_id == user_id
        )
        return await self.storage.read(lambda conn: conn.execute(query).first() is not None)

    async def pending(self) -> list[PairingCode]:
        query = (
            sa.select(pairing_codes)
            .where(pairing_codes.c.expires_at > self.clock())
            .order_by(pairing_codes.c.created_at)
        )
        return await self.storage.read(lambda conn: [_code(row) for row in conn.execute(query)])

    async def approved(self) -> list[ApprovedUser]:
        query = sa.select(approved_users).order_by(approved_users.c.approved_at)
        return await self.storage.read(lambda conn: [_approved(row) for row in conn.execute(query)])

    async def revoke(self, platform: str, user_id: str) -> bool:
        """Withdraw an approval; True when there was one."""
        statement = sa.delete(approved_users).where(
            approved_users.c.platform == platform, approved_users.c.user_id == user_id
        )
        return await self.storage.write(lambda conn: bool(conn.execute(statement).rowcount))


def _consume(conn: sa.Connection, platform: str, wanted: str, now: float) -> PairingCode | None:
    """Delete the live code of ``platform`` that is ``wanted`` and return it; None when none matches or
    another transaction consumed it since it was read."""
    live = sa.select(pairing_codes).where(
        pairing_codes.c.platform == platform, pairing_codes.c.expires_at > now
    )
    match = None
    for row in conn.execute(live):  # every code is compared, in constant time, whatever matched
        if hmac.compare_digest(row.code.encode(), wanted.encode()):
            match = _code(row)
    if match is None:
        return None
    consumed = conn.execute(sa.delete(pairing_codes).where(pairing_codes.c.code == match.code))
    return match if consumed.rowcount == 1 else None


def _code(row: sa.Row[Any]) -> PairingCode:
    return PairingCode(
        code=row.code,
        platform=row.platform,
        user_id=row.user_id,
        user_name=row.user_name,
        chat_id=row.chat_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
    )


def _approved(row: sa.Row[Any]) -> ApprovedUser:
    return ApprovedUser(
        platform=row.platform,
        user_id=row.user_id,
        user_name=row.user_name,
        chat_id=row.chat_id,
        approved_at=row.approved_at,
        approved_by=row.approved_by,
    )


def _without_new_code(conn: sa.Connection, platform: str, user_id: str, now: float) -> PairingRequest | None:
    """WAITING (their live code is younger than ``NEW_CODE_EVERY``) or FULL (the platform's live codes
    are all taken by others); None when a new code may be issued. Reads only."""
    live = sa.and_(pairing_codes.c.platform == platform, pairing_codes.c.expires_at > now)
    mine = conn.execute(sa.select(pairing_codes).where(live, pairing_codes.c.user_id == user_id)).first()
    if mine is not None and now - mine.created_at < NEW_CODE_EVERY:
        return PairingRequest(RequestOutcome.WAITING, _code(mine))
    others = conn.execute(
        sa.select(sa.func.count()).select_from(pairing_codes).where(live, pairing_codes.c.user_id != user_id)
    ).scalar_one()
    return PairingRequest(RequestOutcome.FULL) if others >= MAX_PENDING_PER_PLATFORM else None
