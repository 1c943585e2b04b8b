"""Retention of the gateway's tables that grow with every message, and forgetting a chat or a person.

Contract (as :mod:`agent.store.retention`): each pruning method handles at most ``batch`` rows in one
short transaction and returns how many it handled (``dry_run``: how many the same call repeated would
handle, changing nothing); rows another process is pruning are skipped (``SKIP LOCKED``).

- :meth:`GatewayRetention.prune_inbox` deletes answered (failed, cancelled, refused) inbox rows received
  before ``before`` with their outbox rows, never a pending one, one whose outbox row is still pending,
  or a chat's latest row (the console names the chat by it). The caller keeps ``before`` older than the
  deduplication window (``agent.settings.DEDUPLICATION_DAYS``): a platform's redelivery within it still
  finds its row and is answered once.
- :meth:`GatewayRetention.prune_outbox` deletes sent or failed outbox rows of no message (cron posts,
  approval questions, notices) created before ``before``.
- :meth:`GatewayRetention.prune_approvals` deletes approvals that expired before ``before``.
- The forgetting methods each run in one transaction and are idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from agent.db import Storage, json_text
from gateway.chats import direct_chats_prefix, person_id
from gateway.tables import (
    api_conversations,
    approved_users,
    chat_people,
    chat_settings,
    cron_jobs,
    inbox,
    outbox,
    pairing_codes,
    tool_approvals,
)

PENDING = "pending"


@dataclass
class Pruned:
    """Rows a pruning call handled, and the files of the outbox rows it deleted (voice notes)."""

    rows: int = 0
    files: set[str] = field(default_factory=set)


def _count(conn: sa.Connection, table: sa.Table, where: sa.ColumnElement[bool]) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one())


def _locked(column: sa.Column[Any], where: sa.ColumnElement[bool], batch: int) -> sa.Select[Any]:
    return sa.select(column).where(where).order_by(column).limit(batch).with_for_update(skip_locked=True)


def _delete_outbox(conn: sa.Connection, where: sa.ColumnElement[bool]) -> Pruned:
    """Delete the outbox rows ``where`` selects; the files they named."""
    files = {sha for sha in conn.execute(sa.select(outbox.c.media_sha256).where(where)).scalars() if sha}
    rows = int(conn.execute(sa.delete(outbox).where(where)).rowcount or 0)
    return Pruned(rows, files)


_NEWER_IN_CHAT = sa.alias(inbox, "newer")
_OLD_INBOX = sa.and_(
    inbox.c.state != PENDING,
    sa.exists().where(  # not the chat's latest row
        _NEWER_IN_CHAT.c.platform == inbox.c.platform,
        _NEWER_IN_CHAT.c.chat_id == inbox.c.chat_id,
        _NEWER_IN_CHAT.c.id > inbox.c.id,
    ),
    ~sa.exists().where(outbox.c.inbox_id == inbox.c.id, outbox.c.state == PENDING),
)


class GatewayRetention:
    """Pruning and forgetting over the gateway's tables (see the module)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def prune_inbox(self, before: float, batch: int, *, dry_run: bool = False) -> Pruned:
        where = sa.and_(inbox.c.received_at < before, _OLD_INBOX)
        if dry_run:
            answers = outbox.c.inbox_id.in_(sa.select(inbox.c.id).where(where))
            return Pruned(
                await self.storage.read(lambda c: _count(c, inbox, where) + _count(c, outbox, answers))
            )

        def delete(conn: sa.Connection) -> Pruned:
            ids = list(conn.execute(_locked(inbox.c.id, where, batch)).scalars())
            if not ids:
                return Pruned()
            answers = _delete_outbox(conn, outbox.c.inbox_id.in_(ids))
            conn.execute(sa.delete(inbox).where(inbox.c.id.in_(ids)))
            return Pruned(len(ids) + answers.rows, answers.files)

        return await self.storage.write(delete)

    async def prune_outbox(self, before: float, batch: int, *, dry_run: bool = False) -> Pruned:
        asked = sa.select(tool_approvals.c.prompt_outbox_id).where(
            tool_approvals.c.state == PENDING, tool_approvals.c.prompt_outbox_id.is_not(None)
        )
        where = sa.and_(
            outbox.c.inbox_id.is_(None),
            outbox.c.state != PENDING,
            outbox.c.created_at < before,
            outbox.c.id.not_in(asked),  # its buttons are edited once the approval is decided
        )
        if dry_run:
            return Pruned(await self.storage.read(lambda conn: _count(conn, outbox, where)))

        def delete(conn: sa.Connection) -> Pruned:
            ids = list(conn.execute(_locked(outbox.c.id, where, batch)).scalars())
            return _delete_outbox(conn, outbox.c.id.in_(ids)) if ids else Pruned()

        return await self.storage.write(delete)

    async def prune_approvals(self, before: float, batch: int, *, dry_run: bool = False) -> int:
        where = tool_approvals.c.expires_at < before
        if dry_run:
            return await self.storage.read(lambda conn: _count(conn, tool_approvals, where))

        def delete(conn: sa.Connection) -> int:
            codes = list(conn.execute(_locked(tool_approvals.c.code, where, batch)).scalars())
            if codes:
                conn.execute(sa.delete(tool_approvals).where(tool_approvals.c.code.in_(codes)))
            return len(codes)

        return await self.storage.write(delete)

    async def files_still_sent(self, hashes: Sequence[str]) -> set[str]:
        """Those of ``hashes`` an outbox row still names."""
        if not hashes:
            return set()
        query = sa.select(outbox.c.media_sha256).where(outbox.c.media_sha256.in_(list(hashes))).distinct()
        return set(await self.storage.read(lambda conn: list(conn.execute(query).scalars())))

    # -- forgetting ----------------------------------------------------------------------------------

    async def person_chats(self, platform: str, user_id: str) -> list[str]:
        """The session keys of the person's own conversations: their direct chats (as the inbox saw them
        write there) and their API conversations."""
        person = person_id(platform, user_id)
        direct = sa.select(chat_people.c.session_key).where(
            chat_people.c.user_id == user_id,
            chat_people.c.session_key.startswith(direct_chats_prefix(platform), autoescape=True),
        )
        api = sa.select(api_conversations.c.session_key).where(api_conversations.c.person == person)
        query = sa.union(direct, api)
        return sorted(await self.storage.read(lambda conn: list(conn.execute(query).scalars())))

    async def jobs_of(
        self,
        *,
        person: str | None = None,
        platform: str = "",
        chat_id: str = "",
        thread_id: str | None = None,
    ) -> list[str]:
        """The scheduled jobs a person made (``person``), or that post into a chat (into one topic of it,
        given ``thread_id``)."""
        if person is not None:
            where = cron_jobs.c.created_by == person
        else:
            where = sa.and_(cron_jobs.c.platform == platform, cron_jobs.c.chat_id == chat_id)
            if thread_id is not None:
                where = sa.and_(where, cron_jobs.c.thread_id == thread_id)
        query = sa.select(cron_jobs.c.id).where(where).order_by(cron_jobs.c.id)
        return list(await self.storage.read(lambda conn: list(conn.execute(query).scalars())))

    async def forget_chat(
        self,
        session_key: str,
        platform: str | None,
        chat_id: str | None,
        thread_id: str | None,
        whole_chat: bool,
    ) -> Pruned:
        """Delete the chat's inbox rows and every outbox row of it (pending ones too: nothing more is sent
        there), who wrote there, its settings, API conversation and approvals. ``platform``/``chat_id``/
        ``thread_id``: where it is (None: no chat, such as a job's runs); ``whole_chat``: the key is the
        whole chat (a direct chat, a group without topics), so its outbox rows of no message go too."""

        def delete(conn: sa.Connection) -> Pruned:
            ids = sa.select(inbox.c.id).where(inbox.c.session_key == session_key).scalar_subquery()
            found = _delete_outbox(conn, outbox.c.inbox_id.in_(ids))
            if platform is not None and chat_id is not None:
                place = sa.and_(outbox.c.platform == platform, outbox.c.chat_id == chat_id)
                if not whole_chat:
                    place = sa.and_(place, outbox.c.thread_id == thread_id)
                more = _delete_outbox(conn, sa.and_(place, outbox.c.inbox_id.is_(None)))
                found = Pruned(found.rows + more.rows, found.files | more.files)
            rows = found.rows + int(
                conn.execute(sa.delete(inbox).where(inbox.c.session_key == session_key)).rowcount or 0
            )
            for table in (chat_people, chat_settings, api_conversations, tool_approvals):
                rows += int(
                    conn.execute(sa.delete(table).where(table.c.session_key == session_key)).rowcount or 0
                )
            return Pruned(rows, found.files)

        return await self.storage.write(delete)

    async def forget_person(self, platform: str, user_id: str, jobs: Sequence[str]) -> int:
        """Delete what names the person outside their own chats: their messages in groups' inboxes
        (answered ones), who-wrote-where, their pairing and approval, the approvals they asked for or
        decided (names dropped), and the scheduled jobs ``jobs`` they made."""
        person = person_id(platform, user_id)

        def delete(conn: sa.Connection) -> int:
            wrote = sa.select(chat_people.c.session_key).where(chat_people.c.user_id == user_id)
            theirs = sa.and_(
                inbox.c.platform == platform,
                inbox.c.session_key.in_(wrote),
                json_text(inbox.c.message, "user_id") == user_id,
                inbox.c.state != PENDING,
            )
            ids = sa.select(inbox.c.id).where(theirs).scalar_subquery()
            rows = _delete_outbox(conn, outbox.c.inbox_id.in_(ids)).rows
            rows += int(conn.execute(sa.delete(inbox).where(theirs)).rowcount or 0)
            statements = [
                sa.delete(chat_people).where(
                    chat_people.c.user_id == user_id,
                    chat_people.c.session_key.startswith(f"{platform}:", autoescape=True),
                ),
                sa.delete(approved_users).where(
                    approved_users.c.platform == platform, approved_users.c.user_id == user_id
                ),
                sa.delete(pairing_codes).where(
                    pairing_codes.c.platform == platform, pairing_codes.c.user_id == user_id
                ),
                sa.update(tool_approvals).where(tool_approvals.c.person == person).values(person=None),
                sa.update(tool_approvals)
                .where(tool_approvals.c.decided_by == person)
                .values(decided_by=None, decided_by_name=None),
            ]
            if jobs:
                statements.append(sa.delete(cron_jobs).where(cron_jobs.c.id.in_(list(jobs))))
            for statement in statements:
                rows += int(conn.execute(statement).rowcount or 0)
            return rows

        return await self.storage.write(delete)

    async def forget_jobs(self, jobs: Sequence[str]) -> int:
        if not jobs:
            return 0
        statement = sa.delete(cron_jobs).where(cron_jobs.c.id.in_(list(jobs)))
        return await self.storage.write(lambda conn: int(conn.execute(statement).rowcount or 0))
