"""Small facts the gateway remembers between runs: the hash of each platform's published command menu.

Contract: :meth:`GatewayFacts.remember` is idempotent (the last value wins).
"""

from __future__ import annotations

import sqlalchemy as sa

from agent.storage.base import Storage
from agent.storage.schema import gateway_state
from agent.storage.sql import upsert


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
