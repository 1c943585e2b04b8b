"""Retention, on SQLite and PostgreSQL: ``herald storage prune`` deletes what ``storage.retention`` keeps no
longer and leaves every figure a person reads exact (insights, budgets, the console); ``--dry-run`` only
counts; a redelivery inside the deduplication window is still answered once; ``herald sessions delete``
forgets a chat or a person everywhere while their spend stays, under no name."""

from __future__ import annotations

import time
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from adapters.base import ChatAddress, ChatType, InboundMessage, OutboundText, OutboundVoice
from agent.api import AuditLog, AuditOutcome, SessionStore, day_window, month_window
from agent.db import Storage, metadata, sessions
from agent.memory import user_scope
from agent.model.media import Media
from agent.model.messages import Message
from agent.prompt import SystemPrompt
from agent.store import NewSession
from agent.store.audit import AuditEntry
from agent.usage import RequestUsage, Usage
from gateway.budgets.book import BudgetBook
from gateway.config import BudgetSettings
from gateway.console.reports import ChatSort, Reports
from gateway.home import HeraldHome
from gateway.home.database import home_config, open_home_storage
from gateway.home.memory_skills import memory_and_skills
from gateway.ledger.inbox import Inbox, InboxEntry, InboxState, finish_row
from gateway.ledger.outbox import Operation, OutboxState, Outgoing, insert_items
from gateway.tables import approved_users, cron_jobs, inbox, outbox
from tests.helpers import herald_cli

pytestmark = pytest.mark.each_database

DAY = 86_400.0
UTC = ZoneInfo("UTC")


def inbound(chat: str, user: str, message_id: str, *, group: bool = False) -> InboxEntry:
    kind = ChatType.GROUP if group else ChatType.DIRECT
    message = InboundMessage(
        platform="telegram", chat_id=chat, chat_type=kind, user_id=user, user_name=f"person {user}",
        message_id=message_id, text="hello", timestamp=time.time(), chat_title="the group" if group else None,
    )  # fmt: skip
    return InboxEntry(message, f"telegram:{'group' if group else 'dm'}:{chat}")


async def answered(storage: Storage, entry: InboxEntry, days_ago: float, voice: bytes | None = None) -> None:
    """A message stored ``days_ago`` and answered (its answer sent)."""
    [row] = await Inbox(storage).record_batch([entry])
    assert row is not None
    address = ChatAddress("telegram", entry.message.chat_id)
    item = Outgoing(address, Operation.SEND, OutboundText("an answer"))
    if voice is not None:
        item = Outgoing(address, Operation.SEND_VOICE, OutboundText("said"), voice=OutboundVoice(voice, 1.0))

    def answer(conn: sa.Connection) -> None:
        finish_row(conn, row.id, InboxState.ANSWERED)
        queued = insert_items(conn, [item], inbox_id=row.id)
        when = time.time() - days_ago * DAY
        conn.execute(sa.update(inbox).where(inbox.c.id == row.id).values(received_at=when))
        conn.execute(
            sa.update(outbox)
            .where(outbox.c.id.in_(queued))
            .values(state=OutboxState.SENT.value, created_at=when, sent_at=when)
        )

    await storage.write(answer)


async def chat_session(store: SessionStore, session_id: str, key: str, user: str, scope: str) -> None:
    await store.sessions.create(
        NewSession(
            id=session_id, session_key=key, source="telegram", platform="telegram",
            chat_id=key.split(":")[-1], user_id=user, title=f"title of {session_id}",
            system_prompt=SystemPrompt("s", "", f"about {user}"), tools_json="[]", provider="anthropic",
            model="m", memory_scope=scope,
        )
    )  # fmt: skip


async def spend(store: SessionStore, session_id: str, key: str, user: str, days_ago: float, cost: float) -> None:  # noqa: E501
    when = time.time() - days_ago * DAY
    windows = [day_window(when, UTC), month_window(when, UTC)]
    scopes = ["bot", f"chat:{key}", f"person:telegram:{user}"]
    usage = Usage(input_tokens=1000, output_tokens=50, cache_read_tokens=4000, cache_write_5m_tokens=300)
    await store.usage.record(
        session_id,
        RequestUsage("turn", "anthropic", "m", usage, cost, cost * 3),
        at=when,
        spend=[(scope, window.id) for scope in scopes for window in windows],
    )


def insert_row(conn: sa.Connection, values: dict[str, object]) -> None:
    conn.execute(sa.insert(cron_jobs).values(values))


async def everything(storage: Storage, table: sa.Table) -> list[Any]:
    return list(await storage.read(lambda conn: conn.execute(sa.select(table)).all()))


async def count(storage: Storage, table: sa.Table) -> int:
    query = sa.select(sa.func.count()).select_from(table)
    return int(await storage.read(lambda conn: conn.execute(query).scalar_one()))


async def figures(home: HeraldHome, now: float) -> tuple[Any, ...]:
    """What a person reads: insights, budgets, the console's overview and chat list."""
    config = home_config(home)
    async with open_home_storage(home) as storage:
        book = BudgetBook(BudgetSettings(), SessionStore(storage).spending, UTC)
        reports = Reports(storage, SessionStore(storage), UTC, book)
        overview = await reports.overview(now)
        chats = await reports.chats(ChatSort.SPEND, True, 1)
    assert config.storage.retention.usage_days == 90
    return await herald_cli("insights"), await herald_cli("budget"), overview, chats.rows


async def test_prune_deletes_what_retention_keeps_no_longer_and_every_figure_stays(home: HeraldHome) -> None:
    async with open_home_storage(home) as storage:
        store = SessionStore(storage)
        await chat_session(store, "dm-1", "telegram:dm:1", "1", "user:telegram:1")
        await chat_session(store, "g-1", "telegram:group:-5", "2", "chat:telegram:-5")
        for days_ago, cost in ((400, 0.125), (200, 0.5), (120, 0.25), (95, 1.0), (10, 0.375), (0, 0.0625)):
            await spend(store, "dm-1", "telegram:dm:1", "1", days_ago, cost)
            await spend(store, "g-1", "telegram:group:-5", "2", days_ago, cost * 2)
        await answered(storage, inbound("1", "1", "old"), 30)
        await answered(storage, inbound("1", "1", "recent"), 1)  # inside the deduplication window
        await answered(storage, inbound("-5", "2", "latest of its chat", group=True), 30)
        old_audit = AuditLog(storage, clock=lambda: time.time() - 400 * DAY)
        await old_audit.record(AuditEntry("telegram:dm:1", "dm-1", "terminal", "ls", AuditOutcome.RAN))
        await AuditLog(storage).record(AuditEntry("telegram:dm:1", "dm-1", "shell", "cd", AuditOutcome.RAN))
        counts = {table.name: await count(storage, table) for table in metadata.sorted_tables}
    now = time.time()
    before = await figures(home, now)

    dry = await herald_cli("storage", "prune", "--dry-run")
    assert "8 usage rows added up into days older than 90 days" in dry  # 4 old requests in each chat
    assert "2 inbox and outbox rows of answered messages older than 7 days" in dry
    assert "1 audit rows older than 365 days" in dry and "Nothing was changed" in dry
    assert "20 spending windows of past days and runs older than 90 days" in dry  # 4 days x 5 scopes
    async with open_home_storage(home) as storage:
        assert {table.name: await count(storage, table) for table in metadata.sorted_tables} == counts

    done = await herald_cli("storage", "prune")
    assert "Deleted (storage.retention in config.yaml):" in done
    async with open_home_storage(home) as storage:
        assert await count(storage, metadata.tables["requests"]) == 4  # 10 days ago and today, each chat
        assert await count(storage, metadata.tables["usage_days"]) == 8
        assert await count(storage, metadata.tables["tool_audit"]) == 1
        kept = await storage.read(lambda conn: conn.execute(sa.select(inbox.c.message_id)).scalars().all())
        assert sorted(kept) == ["latest of its chat", "recent"]
        assert await count(storage, outbox) == 2
        # A redelivery inside the window still finds its row: it is not answered twice.
        assert await Inbox(storage).record(inbound("1", "1", "recent").message, "telegram:dm:1") is None
    assert await figures(home, now) == before
    again = await herald_cli("storage", "prune", "--dry-run")
    assert "0 usage rows" in again and "0 inbox and outbox rows" in again


async def test_sessions_delete_forgets_a_person_everywhere_and_keeps_what_they_cost(home: HeraldHome) -> None:
    picture = Media.of("image", "image/png", b"\x89PNG a picture of zelda", name="me.png", tokens=10)
    config = home_config(home)
    async with open_home_storage(home) as storage:
        store = SessionStore(storage)
        await chat_session(store, "dm-a", "telegram:dm:zelda", "zelda", user_scope("telegram", "zelda"))
        await store.messages.append("dm-a", [Message("user", "zelda: my secret is 42", media=(picture,))])
        await spend(store, "dm-a", "telegram:dm:zelda", "zelda", 0, 0.5)
        await chat_session(store, "dm-8", "telegram:dm:8", "8", user_scope("telegram", "8"))
        await store.messages.append("dm-8", [Message("user", "another person")])
        await spend(store, "dm-8", "telegram:dm:8", "8", 0, 0.25)
        await answered(storage, inbound("zelda", "zelda", "m1"), 0, voice=b"OggS voice for zelda")
        await answered(storage, inbound("-5", "zelda", "m2", group=True), 0)
        await answered(storage, inbound("8", "8", "m3"), 0)
        await storage.write(
            lambda conn: conn.execute(
                sa.insert(approved_users).values(
                    platform="telegram", user_id="zelda", user_name="person zelda", chat_id="zelda",
                    approved_at=time.time(), approved_by="telegram:1",
                )
            )
        )  # fmt: skip
        memory = memory_and_skills(config, home, storage).memory
        await memory.store(user_scope("telegram", "zelda")).add("user", "zelda likes tea")
        await memory.store(user_scope("telegram", "8")).add("user", "8 likes coffee")
    now = time.time()
    insights, budget, overview, _ = await figures(home, now)

    done = await herald_cli("sessions", "delete", "--person", "telegram:zelda")
    assert "chats: telegram:dm:zelda" in done
    assert "1 messages, 2 files" in done  # the picture and the voice note
    assert "memory: user:telegram:zelda" in done

    async with open_home_storage(home) as storage:
        tables = metadata.sorted_tables
        rows = [(table.name, str(tuple(row))) for table in tables for row in await everything(storage, table)]
        assert [row for row in rows if "zelda" in row[1]] == []  # nothing names them or holds their words
        assert any("another person" in text for _, text in rows)  # another person's chat is untouched
        memory = memory_and_skills(config, home, storage).memory
        assert await memory.scopes() == [user_scope("telegram", "8")]
    after_insights, after_budget, after_overview, _ = await figures(home, now)
    assert after_overview.all_time == overview.all_time and after_overview.windows == overview.windows
    total = [line for line in insights.splitlines() if line.startswith("all sessions")]
    assert total and total == [line for line in after_insights.splitlines() if line.startswith("all ")]
    assert "bot" in budget and budget.split("\n")[0] == after_budget.split("\n")[0]
    assert "zelda" not in after_insights

    nothing = await herald_cli_failing("sessions", "delete", "--chat", "telegram:dm:zelda")
    assert "Nothing of chat telegram:dm:zelda was found" in nothing


async def herald_cli_failing(*args: str) -> str:
    import asyncio
    import contextlib
    import io

    from gateway.cli.dispatch import run

    def call() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert run(list(args)) == 1
        return out.getvalue()

    return await asyncio.to_thread(call)


async def test_sessions_delete_of_a_group_takes_its_memory_and_its_jobs_with_it(home: HeraldHome) -> None:
    config = home_config(home)
    group, other = "telegram:group:-5", "telegram:group:-6"
    async with open_home_storage(home) as storage:
        store = SessionStore(storage)
        await chat_session(store, "g-a", group, "1", "chat:telegram:-5")
        await chat_session(store, "g-b", other, "1", "chat:telegram:-6")
        await chat_session(store, "run-a", "cron:job-a", "1", "chat:telegram:-5")  # the job's runs
        for job, chat in (("job-a", "-5"), ("job-b", "-6")):
            values: dict[str, object] = {
                "id": job, "name": job, "prompt": "p", "schedule": "every 1h", "platform": "telegram",
                "chat_id": chat, "origin_key": f"telegram:group:{chat}", "created_at": 0.0, "updated_at": 0.0,
                "memory_scope": f"chat:telegram:{chat}",
            }  # fmt: skip
            await storage.write(partial(insert_row, values=values))
        memory = memory_and_skills(config, home, storage).memory
        for chat in ("-5", "-6"):
            await memory.store(f"chat:telegram:{chat}").add("memory", f"group {chat} meets on Mondays")

    done = await herald_cli("sessions", "delete", "--chat", group)
    assert "chats: telegram:group:-5, cron:job-a" in done and "1 scheduled jobs" in done

    async with open_home_storage(home) as storage:
        keys = [row.session_key for row in await everything(storage, sessions)]
        assert other in keys and group not in keys and "cron:job-a" not in keys and len(keys) == 3
        jobs = await storage.read(lambda conn: conn.execute(sa.select(cron_jobs.c.id)).scalars().all())
        assert jobs == ["job-b"]
        assert await memory_and_skills(config, home, storage).memory.scopes() == ["chat:telegram:-6"]
