"""Small facts the gateway remembers between runs: the hash of each platform's published command menu,
the operator console's signing secret.

Contract: :meth:`GatewayFacts.remember` is idempotent (the last value wins); :meth:`GatewayFacts.settle`
keeps the first value ever stored (of processes storing one at once, all get the same back).
"""

from __future__ import annotations

import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.schema import gateway_state
from agent.storage.sql import insert_ignoring_duplicates, upsert


class GatewayFacts:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def recall(self, key: str) -> str | None:
        query = sa.select(gateway_state.c.value).where(gateway_state.c.key == key)
        return await self.storage.read(lambda conn: conn.execute(query).scalar())

    async def remember(self, key: str, value: str) -> None:
        await self.storage.write(
            lambda conn: upsert(conn, gateway_state, {"key": key, "value": value}, ["key"])
        )

    async def settle(self, key: str, value: str) -> str:
        """The value stored at ``key``; ``value`` is stored first when there is none."""
        query = sa.select(gateway_state.c.value).where(gateway_state.c.key == key)

        def settle(conn: sa.Connection) -> str:
            insert_ignoring_duplicates(conn, gateway_state, {"key": key, "value": value})
            return str(conn.execute(query).scalar_one())

        return await self.storage.write(settle)
