"""DM pairing: an unknown person who writes to the bot directly gets a one-time code for an admin.

Codes are 8 characters from an alphabet without look-alikes, expire after an hour, at most 3 wait per
platform, and a person gets a new code at most every 10 minutes. An admin approves with
``herald pairing approve PLATFORM CODE`` or ``/approve CODE``; approvals live in ``state.db`` and
survive restarts. Codes are compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from adapters.base import ChatAddress, OutboundText
from agent.db import Database
from gateway.outbox import Operation, Outgoing

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
    """The message that tells an approved person (queued in the outbox by whoever approved them)."""
    return Outgoing(ChatAddress(user.platform, user.chat_id), Operation.SEND, OutboundText(WELCOME))


def new_code(choose: Callable[[str], str] = secrets.choice) -> str:
    return "".join(choose(ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What a person typed, as a code: upper case, no spaces or dashes."""
    return "".join(text.split()).replace("-", "").upper()


class Pairing:
    """Pairing codes and approved people in ``state.db``."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    async def request(self, platform: str, user_id: str, user_name: str, chat_id: str) -> PairingRequest:
        """An unknown person wrote in a direct chat: issue a code if the rules allow one.

        Only issuing a code writes: a stranger who keeps writing while their code is fresh (or while
        the platform's codes are all taken) costs one read, never the write lock turns need.
        """
        now = self.clock()
        known = await self.db.run(lambda conn: _without_new_code(conn, platform, user_id, now))
        if known is not None:
            return known

        def issue(conn: sqlite3.Connection) -> PairingRequest:
            now = self.clock()
            decided = _without_new_code(conn, platform, user_id, now)  # again, inside the transaction
            if decided is not None:
                return decided
            conn.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", (now,))
            conn.execute("DELETE FROM pairing_codes WHERE platform = ? AND user_id = ?", (platform, user_id))
            code = PairingCode(new_code(), platform, user_id, user_name, chat_id, now, now + CODE_TTL)
            conn.execute(
                "INSERT INTO pairing_codes VALUES (?,?,?,?,?,?,?)",
                (code.code, platform, user_id, user_name, chat_id, code.created_at, code.expires_at),
            )
            return PairingRequest(RequestOutcome.NEW_CODE, code)

        return await self.db.write(issue)

    async def approve(self, platform: str, typed: str, approved_by: str) -> ApprovedUser | None:
        """Approve the person whose live code matches ``typed``; None when no code matches."""
        wanted = normalize_code(typed)

        def approve(conn: sqlite3.Connection) -> ApprovedUser | None:
            now = self.clock()
            rows = conn.execute(
                "SELECT * FROM pairing_codes WHERE platform = ? AND expires_at > ?", (platform, now)
            ).fetchall()
            match = None
            for row in rows:  # every code is compared, in constant time, whatever matched before
                if hmac.compare_digest(row["code"].encode(), wanted.encode()):
                    match = row
            if match is None:
                return None
            conn.execute("DELETE FROM pairing_codes WHERE code = ?", (match["code"],))
            user = ApprovedUser(
                platform, match["user_id"], match["user_name"], match["chat_id"], now, approved_by
            )
            conn.execute(
                "INSERT OR REPLACE INTO approved_users VALUES (?,?,?,?,?,?)",
                (
                    user.platform,
                    user.user_id,
                    user.user_name,
                    user.chat_id,
                    user.approved_at,
                    user.approved_by,
                ),
            )
            return user

        return await self.db.write(approve)

    async def is_approved(self, platform: str, user_id: str) -> bool:
        def select(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT 1 FROM approved_users WHERE platform = ? AND user_id = ?", (platform, user_id)
            ).fetchone()
            return row is not None

        return await self.db.run(select)

    async def pending(self) -> list[PairingCode]:
        def select(conn: sqlite3.Connection) -> list[PairingCode]:
            rows = conn.execute(
                "SELECT * FROM pairing_codes WHERE expires_at > ? ORDER BY created_at", (self.clock(),)
            ).fetchall()
            return [_code(row) for row in rows]

        return await self.db.run(select)

    async def approved(self) -> list[ApprovedUser]:
        def select(conn: sqlite3.Connection) -> list[ApprovedUser]:
            rows = conn.execute("SELECT * FROM approved_users ORDER BY approved_at").fetchall()
            return [ApprovedUser(*tuple(row)) for row in rows]

        return await self.db.run(select)

    async def revoke(self, platform: str, user_id: str) -> bool:
        """Withdraw an approval; True when there was one."""
        count = await self.db.write(
            lambda conn: (
                conn.execute(
                    "DELETE FROM approved_users WHERE platform = ? AND user_id = ?", (platform, user_id)
                ).rowcount
            )
        )
        return bool(count)


def _code(row: sqlite3.Row) -> PairingCode:
    return PairingCode(*tuple(row))


def _without_new_code(
    conn: sqlite3.Connection, platform: str, user_id: str, now: float
) -> PairingRequest | None:
    """WAITING (their live code is younger than ``NEW_CODE_EVERY``) or FULL (the platform's live codes
    are all taken by others); None when a new code may be issued. Reads only."""
    mine = conn.execute(
        "SELECT * FROM pairing_codes WHERE platform = ? AND user_id = ? AND expires_at > ?",
        (platform, user_id, now),
    ).fetchone()
    if mine is not None and now - mine["created_at"] < NEW_CODE_EVERY:
        return PairingRequest(RequestOutcome.WAITING, _code(mine))
    others = conn.execute(
        "SELECT COUNT(*) FROM pairing_codes WHERE platform = ? AND user_id != ? AND expires_at > ?",
        (platform, user_id, now),
    ).fetchone()[0]
    return PairingRequest(RequestOutcome.FULL) if others >= MAX_PENDING_PER_PLATFORM else None
