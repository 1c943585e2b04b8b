"""Session leases: which process holds a session key's cross-process lock, until when (``leases``).

:class:`agent.locks.DatabaseSessionLocks` is the one user. An owner is a string naming one process
(``host:pid:token``); a lease lasts until ``expires_at`` unless its owner extends it.

Contract (the same on SQLite and PostgreSQL, with any number of processes on either):

- :meth:`SessionLeases.take` is atomic: of several owners taking one key at once, at most one gets it.
  Each write is a compare-and-set (an insert that yields to an existing row; an update whose ``WHERE``
  names the owner and expiry it read), so on PostgreSQL, where transactions run side by side, a row
  that changed after it was read is not overwritten: that attempt fails and the row is read again. It
  is safe to retry, and taking a lease one already holds extends it.
- :meth:`SessionLeases.extend` extends only a lease the owner still holds; it says whether it did.
- :meth:`SessionLeases.release` deletes only the owner's own lease; idempotent. After the storage was
  closed it does nothing (the lease then lapses at its expiry).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.schema import leases
from agent.db.sql import insert_ignoring_duplicates

log = logging.getLogger(__name__)

ATTEMPTS = 3  # compare-and-set rounds in one take before reporting the key busy (PostgreSQL races)
CONTESTED = "another process"  # the holder reported when the row kept changing under every attempt

_KEY = leases.c.key == sa.bindparam("lease_key")
_OWNER = leases.c.owner == sa.bindparam("lease_owner")
_NEW_EXPIRY = sa.bindparam("new_expires_at", type_=sa.Double)
_HOLDER = sa.select(leases.c.owner, leases.c.expires_at).where(_KEY)
_TAKE_OVER = (
    sa.update(leases)
    .where(
        _KEY,
        leases.c.owner == sa.bindparam("seen_owner"),
        leases.c.expires_at == sa.bindparam("seen_expires_at", type_=sa.Double),
    )
    .values(owner=sa.bindparam("new_owner"), expires_at=_NEW_EXPIRY)
)
_EXTEND = sa.update(leases).where(_KEY, _OWNER).values(expires_at=_NEW_EXPIRY)
_RELEASE = sa.delete(leases).where(_KEY, _OWNER)


class SessionLeases:
    """The ``leases`` table."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def take(
        self, key: str, owner: str, seconds: float, *, gone: Callable[[str], bool] = lambda _: False
    ) -> str | None:
        """Hold ``key`` for ``seconds`` from now if it is free, expired, already ``owner``'s, or held
        by an owner that ``gone(holder)`` says has stopped. None when ``owner`` holds it now; otherwise
        the holder."""
        return await self.storage.write(lambda conn: _take(conn, key, owner, seconds, gone))

    async def extend(self, key: str, owner: str, seconds: float) -> bool:
        """Move the expiry of ``owner``'s lease of ``key`` to ``seconds`` from now; False when
        ``owner`` does not hold it (another process took it over)."""
        parameters = {"lease_key": key, "lease_owner": owner, "new_expires_at": time.time() + seconds}
        count = await self.storage.write(lambda conn: conn.execute(_EXTEND, parameters).rowcount)
        return bool(count)

    async def release(self, key: str, owner: str) -> None:
        if self.storage.closed:
            return
        parameters = {"lease_key": key, "lease_owner": owner}
        await self.storage.write(lambda conn: conn.execute(_RELEASE, parameters))

    async def holder(self, key: str) -> str | None:
        """The owner of ``key``'s lease, expired or not; None when nobody has one."""
        parameters = {"lease_key": key}
        return await self.storage.read(lambda conn: conn.execute(_HOLDER, parameters).scalar())


def _take(
    conn: sa.Connection, key: str, owner: str, seconds: float, gone: Callable[[str], bool]
) -> str | None:
    now = time.time()
    claim = {"key": key, "owner": owner, "expires_at": now + seconds}
    for _ in range(ATTEMPTS):
        if insert_ignoring_duplicates(conn, leases, claim):  # nobody had it: the usual case, one statement
            return None
        seen = conn.execute(_HOLDER, {"lease_key": key}).first()
        if seen is None:
            continue  # released since: claim it again
        if seen.owner != owner and seen.expires_at > now and not gone(seen.owner):
            return str(seen.owner)
        parameters = {
            "lease_key": key,
            "seen_owner": seen.owner,
            "seen_expires_at": seen.expires_at,
            "new_owner": owner,
            "new_expires_at": now + seconds,
        }
        if conn.execute(_TAKE_OVER, parameters).rowcount:
            if seen.owner != owner:
                log.warning("taking over the lease of session %s from %s (expired or gone)", key, seen.owner)
            return None
    return CONTESTED
