"""Per-chat choices that outlive a session: the model the chat's *next* session is built for.

``/model NAME`` stores it here; a running session keeps the model it was built for (changing it
mid-session would throw away the session's cache), so the choice applies from ``/new`` on.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from agent.db import Database


@dataclass(frozen=True)
class ModelChoice:
    provider: str
    model: str


class ChatSettings:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def model_for(self, session_key: str) -> ModelChoice | None:
        def select(conn: sqlite3.Connection) -> ModelChoice | None:
            row = conn.execute(
                "SELECT provider, model FROM chat_settings WHERE session_key = ?", (session_key,)
            ).fetchone()
            if row is None or row["model"] is None:
                return None
            return ModelChoice(row["provider"], row["model"])

        return await self.db.run(select)

    async def set_model(self, session_key: str, choice: ModelChoice) -> None:
        await self.db.write(
            lambda conn: conn.execute(
                "INSERT INTO chat_settings (session_key, provider, model) VALUES (?,?,?) ON CONFLICT"
                "(session_key) DO UPDATE SET provider = excluded.provider, model = excluded.model",
                (session_key, choice.provider, choice.model),
            )
        )
