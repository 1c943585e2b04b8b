"""Per-chat choices that outlive a session: the model the chat's *next* session is built for.

``/model NAME`` stores it here; a running session keeps the model it was built for (changing it
mid-session would throw away the session's cache), so the choice applies from ``/new`` on.

Contract: :meth:`ChatSettings.set_model` is idempotent (the last choice wins); reads see every write
that returned before them.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from agent.db import Storage, upsert
from gateway.tables import chat_settings


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    model: str


class ChatSettings:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def model_for(self, session_key: str) -> ModelChoice | None:
        def select(conn: sa.Connection) -> ModelChoice | None:
            query = sa.select(chat_settings.c.provider, chat_settings.c.model).where(
                chat_settings.c.session_key == session_key
            )
            row = conn.execute(query).first()
            if row is None or row.model is None:
                return None
            return ModelChoice(row.provider, row.model)

        return await self.storage.read(select)

    async def set_model(self, session_key: str, choice: ModelChoice) -> None:
        values = {"session_key": session_key, "provider": choice.provider, "model": choice.model}
        await self.storage.write(lambda conn: upsert(conn, chat_settings, values, ["session_key"]))
