"""Where each conversation of the OpenAI-compatible API stands: the ``api_conversations`` table.

One row per session key (one line of a conversation), with the person it belongs to, the client's
conversation id when it sends one, and the *tip*: the digest of the history its client saw last
(``gateway.openai_api.transcript``). A request whose history has that digest continues the session; a
tip of null matches nothing (what the client saw is not known: a turn was withdrawn and could not be
taken out of the history).

Contract: :meth:`Conversations.find` reads; :meth:`Conversations.start` and :meth:`Conversations.move`
are single statements (idempotent: the last write wins), made while holding the session's lease, so
the tip a request reads under the lease is the one the last turn left.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

from agent.db import Storage, upsert
from gateway.tables import api_conversations

_FIND = (
    sa.select(api_conversations.c.session_key)
    .where(
        api_conversations.c.person == sa.bindparam("person"),
        api_conversations.c.tip == sa.bindparam("tip"),
    )
    .order_by(api_conversations.c.updated_at.desc())
    .limit(1)
)
_IN_CONVERSATION = _FIND.where(api_conversations.c.conversation == sa.bindparam("conversation"))
_WITHOUT_CONVERSATION = _FIND.where(api_conversations.c.conversation.is_(None))
_TIP = sa.select(api_conversations.c.tip).where(api_conversations.c.session_key == sa.bindparam("key"))


class Conversations:
    def __init__(self, storage: Storage, clock: Callable[[], float] = time.time) -> None:
        self.storage = storage
        self.clock = clock

    async def find(self, person: str, conversation: str | None, tip: str) -> str | None:
        """The session key of ``person``'s conversation whose client saw ``tip`` last (the most recently
        used, should two have), within the client's ``conversation`` when it names one (or among those
        that named none), else None."""
        if conversation is None:
            statement, parameters = _WITHOUT_CONVERSATION, {"person": person, "tip": tip}
        else:
            statement = _IN_CONVERSATION
            parameters = {"person": person, "tip": tip, "conversation": conversation}
        return await self.storage.read(lambda conn: conn.execute(statement, parameters).scalar())

    async def tip(self, session_key: str) -> str | None:
        """The tip of ``session_key`` now (None: none, or no such conversation)."""
        return await self.storage.read(lambda conn: conn.execute(_TIP, {"key": session_key}).scalar())

    async def start(self, session_key: str, person: str, conversation: str | None, tip: str) -> None:
        """Record a new line of a conversation, at the history it was started with."""
        values = {
            "session_key": session_key,
            "person": person,
            "conversation": conversation,
            "tip": tip,
            "updated_at": self.clock(),
        }
        await self.storage.write(lambda conn: upsert(conn, api_conversations, values, ["session_key"]))

    async def move(self, session_key: str, tip: str | None) -> None:
        """The client of ``session_key`` now holds the history of ``tip`` (None: unknown)."""
        statement = (
            sa.update(api_conversations)
            .where(api_conversations.c.session_key == session_key)
            .values(tip=tip, updated_at=self.clock())
        )
        await self.storage.write(lambda conn: conn.execute(statement))
