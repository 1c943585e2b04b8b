"""Fencing in the store (agent.db.fencing): a write made under a session's older fencing token is
refused whole, on SQLite and PostgreSQL alike; writes outside any lease are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.fencing import Fence, FencedOut, check_fences, fenced, issue_token, newest_token
from agent.db.schema import session_fences
from agent.db.urls import parse_storage_url
from tests.fakes.waiting import WAIT_TIMEOUT

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


async def test_a_process_stopped_inside_a_fenced_write_does_not_hold_the_session_for_ever(
    postgresql_database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A process SIGSTOPped between its fence check and its commit keeps the session's fencing row
    locked; the server ends such a transaction (idle_in_transaction_session_timeout), so the process
    that takes the session over gets its token instead of waiting as long as the other stays stopped."""
    import agent.db.postgres

    monkeypatch.setattr(agent.db.postgres, "IDLE_IN_TRANSACTION_MS", 1000)
    url = parse_storage_url(postgresql_database, tmp_path)
    async with open_storage(url) as stopped, open_storage(url) as other:
        first = await issue_token(stopped, KEY)
        engine = stopped._engine_or_fail()  # type: ignore[attr-defined]
        async with engine.connect() as conn:
            await conn.begin()
            await conn.run_sync(lambda sync: check_fences(sync, (Fence(KEY, first),)))  # the row is locked
            # ... and the process stops here, its transaction open.
            second = await asyncio.wait_for(issue_token(other, KEY), WAIT_TIMEOUT)
            assert second == first + 1
            with pytest.raises(sa.exc.DBAPIError):  # the stopped one wakes to a closed connection
                await conn.execute(sa.select(1))
