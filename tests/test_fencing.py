"""Fencing in the store (agent.storage.fencing): a write made under a session's older fencing token is
refused whole, on SQLite and PostgreSQL alike; writes outside any lease are not checked."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.fencing import Fence, FencedOut, fenced, issue_token, newest_token
from agent.storage.schema import session_fences

KEY = "telegram:chat:42"


async def test_writes_under_an_older_token_are_refused_whole_on_either_database(storage: Storage) -> None:
    """The check is in Storage.write itself: SQLite and PostgreSQL alike, all or nothing."""
    first = await issue_token(storage, KEY)
    second = await issue_token(storage, KEY)
    assert second == first + 1

    def write(conn: sa.Connection) -> None:
        conn.execute(sa.insert(session_fences).values(session_key="marker", token=7))

    with fenced(Fence(KEY, first)), pytest.raises(FencedOut):
        await storage.write(write)
    assert await newest_token(storage, "marker") is None  # nothing of the transaction was stored
    with fenced(Fence(KEY, second)):
        await storage.write(write)  # the newest token writes
    assert await newest_token(storage, "marker") == 7
    await storage.write(lambda conn: None)  # outside any lease: not fenced
    assert await newest_token(storage, KEY) == second
