"""The SQLite store: WAL, migrations, atomic appends, inactive messages stay searchable."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from agent.messages import Message, ToolCall
from agent.prompt import SystemPrompt
from agent.storage import legacy
from agent.storage.errors import SchemaTooNew
from agent.storage.migrate import head_revision
from agent.store import NewSession, SessionStore, fts_query, open_session_store
from agent.usage import RequestUsage, Usage

PROMPT = SystemPrompt(stable="stable", context="", volatile="volatile")


def open_store(tmp_path: Path) -> AbstractAsyncContextManager[SessionStore]:
    return open_session_store(tmp_path / "state.db")


async def new_session(store: SessionStore, session_id: str = "s1") -> None:
    await store.create_session(
        NewSession(
            id=session_id,
            session_key="cli:local",
            source="cli",
            platform="terminal",
            system_prompt=PROMPT,
            tools_json="[]",
            provider="anthropic",
            model="m",
        )
    )


async def test_schema_is_versioned_and_uses_wal(tmp_path: Path) -> None:
    async with open_store(tmp_path):
        pass
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    async with open_store(tmp_path):  # migrating an up-to-date database is a no-op
        pass


async def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    async with open_store(tmp_path):
        pass
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="migrated by a newer Herald"):
        async with open_store(tmp_path):
            pass


async def test_a_legacy_schema_newer_than_this_herald_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_versions VALUES ('agent', 99)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="newer than this Herald"):
        async with open_store(tmp_path):
            pass


async def test_a_database_from_before_schema_versions_is_adopted_and_upgraded(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    for statement in legacy.AGENT[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO sessions (id, session_key, source, platform, system_prompt, tools_json, provider, "
        "model, created_at, updated_at) VALUES ('old', 'cli:local', 'cli', 'terminal', ?, '[]', "
        "'anthropic', 'm', 1, 1)",
        (PROMPT.to_json(),),
    )
    conn.commit()
    conn.close()
    async with open_store(tmp_path) as store:
        old = await store.get_session("old")
    assert old is not None and old.memory_scope == "owner" and old.compress_failures == 0


async def test_messages_round_trip_with_payloads(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        await new_session(store)
        call = ToolCall(id="t1", name="todo", arguments_json='{"b":1,"a":2}')
        await store.append_messages(
            "s1",
            [
                Message(role="user", content="hi", payload={"role": "user"}, payload_api="anthropic"),
                Message(role="assistant", content="", tool_calls=(call,)),
                Message(role="tool", content="ok", tool_call_id="t1", tool_name="todo", is_error=True),
            ],
        )
        loaded = await store.load_messages("s1")
        assert [m.role for m in loaded] == ["user", "assistant", "tool"]
        assert loaded[0].payload == {"role": "user"} and loaded[0].payload_api == "anthropic"
        assert loaded[1].tool_calls == (call,) and loaded[1].tool_calls[0].arguments_json == '{"b":1,"a":2}'
        assert loaded[2].is_error and loaded[2].tool_call_id == "t1"
        session = await store.get_session("s1")
        assert session is not None and session.message_count == 3


async def test_inactive_messages_leave_the_conversation_but_stay_searchable(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        await new_session(store)
        [first, _] = await store.append_messages(
            "s1",
            [Message(role="user", content="the zebra password"), Message(role="assistant", content="noted")],
        )
        assert first.id is not None
        await store.deactivate_messages([first.id], "compressed")
        assert [m.content for m in await store.load_messages("s1")] == ["noted"]
        hits = await store.search("zebra")
        assert len(hits) == 1 and not hits[0].active and "[zebra]" in hits[0].snippet


async def test_search_treats_user_text_literally(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        await new_session(store)
        await store.append_messages("s1", [Message(role="user", content="what is C++ AND rust: NEAR*")])
        assert len(await store.search('C++ AND "rust:')) == 1
        assert fts_query('a "b') == '"a" """b"'


async def test_usage_accumulates_per_session(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        await new_session(store)
        usage = Usage(input_tokens=10, output_tokens=5, cache_read_tokens=100, cache_write_5m_tokens=20)
        for _ in range(2):
            request = RequestUsage("turn", "anthropic", "m", usage, 0.5, 1.0)
            await store.record_request("s1", request, at=1000.0)
        session = await store.get_session("s1")
        assert session is not None
        assert (session.input_tokens, session.cache_read_tokens, session.cache_write_tokens) == (20, 200, 40)
        assert session.last_prompt_tokens == 130
        assert await store.request_times("s1", since=0) == [1000.0, 1000.0]
        assert session.estimated_cost == 1.0 and session.uncached_cost == 2.0
