"""``herald sessions delete``: forgetting one chat, or one person (their right to be forgotten).

A chat (a session key) loses its messages and the files only they carried, its inbox and outbox rows,
who wrote there, its settings, approvals, audit and cache records, the scheduled jobs that post into it
(with their runs), and the memory its sessions kept (a group's, or a guest's own; never the owner's). A
person loses every conversation of their own (direct chats, API conversations, the jobs they made), their
memory, their pairing, their messages in groups' inboxes and their name in other chats' audit and
approvals. What a group's conversation holds of what they said there stays in the group's history (it
is the group's, and rewriting it would change what every later request of it re-sends).

Money stays exact: a forgotten chat's sessions stay as tombstones that keep only their tokens, costs and
request counts, under a random name (``deleted:…``), with their usage rows; its spending windows (and a
person's) are renamed the same way. So insights, the console and budgets add up as before, and nothing
left names the chat or the person.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from agent.api import AgentRetention
from agent.db import Storage
from agent.memory import OWNER_SCOPE, MemoryBank, user_scope
from gateway.budgets.limits import CHAT, PERSON
from gateway.chats import chat_of_session_key, job_session_key
from gateway.retention.records import GatewayRetention

TOMBSTONE = "deleted:"  # the session key of a forgotten chat's sessions: deleted:RANDOM


@dataclass
class Deleted:
    """What a deletion removed, for the command's report."""

    chats: list[str] = field(default_factory=list)
    sessions: int = 0
    messages: int = 0
    files: int = 0
    rows: int = 0  # inbox, outbox, who wrote where, settings, approvals, audit, pairing
    jobs: int = 0
    memory_scopes: list[str] = field(default_factory=list)


class Forgetter:
    def __init__(self, storage: Storage, memory: MemoryBank, batch: int) -> None:
        self.agent = AgentRetention(storage)
        self.gateway = GatewayRetention(storage)
        self.memory = memory
        self.batch = batch

    async def chat(self, session_key: str, deleted: Deleted | None = None) -> Deleted:
        """Forget one chat (see the module)."""
        deleted = deleted if deleted is not None else Deleted()
        address = chat_of_session_key(session_key)
        jobs: list[str] = []
        if address is not None:
            jobs = await self.gateway.jobs_of(
                platform=address.platform, chat_id=address.chat_id, thread_id=address.thread_id
            )
        pseudonym = TOMBSTONE + secrets.token_hex(8)
        outbox = await self.gateway.forget_chat(
            session_key,
            None if address is None else address.platform,
            None if address is None else address.chat_id,
            None if address is None else address.thread_id,
            whole_chat=address is not None and address.thread_id is None,
        )
        gone = await self.agent.forget_chat(session_key, pseudonym, self.batch)
        await self.agent.pseudonymise_spending(f"{CHAT}:{session_key}", pseudonym)
        files = outbox.files - await self.gateway.files_still_sent(sorted(outbox.files))
        deleted.files += gone.files + await self.agent.forget_files(files)
        if gone.sessions or outbox.rows:
            deleted.chats.append(session_key)
        deleted.sessions += gone.sessions
        deleted.messages += gone.messages
        deleted.rows += outbox.rows + gone.audit
        for scope in gone.memory_scopes:
            await self._forget_memory(scope, deleted)
        for job in jobs:
            await self.chat(job_session_key(job), deleted)
        deleted.jobs += await self.gateway.forget_jobs(jobs)
        return deleted

    async def person(self, platform: str, user_id: str) -> Deleted:
        """Forget one person (see the module)."""
        deleted = Deleted()
        person = f"{platform}:{user_id}"
        chats = sorted(
            {
                *await self.gateway.person_chats(platform, user_id),
                *await self.agent.direct_chats(platform, user_id),
            }
        )
        for key in chats:
            await self.chat(key, deleted)
        jobs = await self.gateway.jobs_of(person=person)
        for job in jobs:
            await self.chat(job_session_key(job), deleted)
        deleted.jobs += len(jobs)
        deleted.rows += await self.gateway.forget_person(platform, user_id, jobs)
        await self.agent.forget_person_marks(person)
        await self.agent.pseudonymise_spending(f"{PERSON}:{person}", TOMBSTONE + secrets.token_hex(8))
        await self._forget_memory(user_scope(platform, user_id), deleted)
        return deleted

    async def _forget_memory(self, scope: str, deleted: Deleted) -> None:
        if scope != OWNER_SCOPE and scope not in deleted.memory_scopes and await self.memory.forget(scope):
            deleted.memory_scopes.append(scope)
