"""One-time login links: what an admin gets by sending ``/console`` to the bot.

A link carries a random secret (32 bytes). Only its SHA-256 is stored, in the database every gateway
process shares, so the link works on whichever process the browser reaches, and a copy of the database
opens nothing. A link logs in once, within :data:`LINK_SECONDS` of being made.

Contract: :meth:`LoginLinks.redeem` consumes a link exactly once (the row is deleted by the statement
that checks it: of two browsers using one link at once, one gets in). Looking the row up by the hash of
what was typed leaks nothing a timing attack could use.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable

import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.schema import console_links

LINK_SECONDS = 600.0


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class LoginLinks:
    """The ``console_links`` table."""

    def __init__(self, storage: Storage, *, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock

    async def issue(self, created_by: str, seconds: float = LINK_SECONDS) -> str:
        """A new link's secret (expired links are swept at the same time)."""
        secret = secrets.token_urlsafe(32)
        now = self.clock()
        row = {
            "token_hash": _hash(secret),
            "created_by": created_by,
            "created_at": now,
            "expires_at": now + seconds,
        }

        def insert(conn: sa.Connection) -> None:
            conn.execute(sa.delete(console_links).where(console_links.c.expires_at <= now))
            conn.execute(sa.insert(console_links).values(**row))

        await self.storage.write(insert)
        return secret

    async def redeem(self, secret: str) -> str | None:
        """Consume the link ``secret``: who made it, or None when it is unknown, used or expired."""
        statement = (
            sa.delete(console_links)
            .where(console_links.c.token_hash == _hash(secret), console_links.c.expires_at > self.clock())
            .returning(console_links.c.created_by)
        )
        return await self.storage.write(lambda conn: conn.execute(statement).scalar())
