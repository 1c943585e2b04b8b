"""The agent's state: migrations of state.db, and the repositories' contracts (atomic appends in order,
files stored once, inactive messages stay searchable, search ranking and scoping, usage totals, the
review schedule). Repository tests run on the ``storage`` fixture, so they hold on either database."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent.db import legacy
from agent.db.base import Storage
from agent.db.errors import SchemaTooNew
from agent.db.migrate import head_revision
from agent.db.schema import media
from agent.db.search import fts_query
from agent.history import SUMMARY_MARK
from agent.model.media import Media
from agent.model.messages import Message, ToolCall
from agent.prompt import SystemPrompt
from agent.store import NewSession, SessionStore
from agent.usage import RequestUsage, Usage
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from tests.helpers import open_store

PROMPT = SystemPrompt(stable="stable", context="", volatile="volatile")


async def new_session(store: SessionStore, session_id: str = "s1", session_key: str = "cli:local") -> None:
    await store.sessions.create(
        NewSession(
            id=session_id,
            session_key=session_key,
            source="cli",
            platform="terminal",
            system_prompt=PROMPT,
            tools_json="[]",
            provider="anthropic",
            model="m",
        )
    )


@pytest.fixture
def store(storage: Storage) -> SessionStore:
    return SessionStore(storage)


@pytest.mark.sqlite_itself  # WAL and the file itself
async def test_schema_is_versioned_and_uses_wal(tmp_path: Path) -> None:
    async with open_store(tmp_path / "state.db"):
        pass
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    async with open_store(tmp_path / "state.db"):  # migrating an up-to-date database is a no-op
        pass


def test_a_database_migrated_by_a_newer_herald_is_refused_in_one_sentence(home: HeraldHome, herald) -> None:
    async def newer() -> str:
        async with open_home_storage(home) as storage:
            bump = sa.text("UPDATE alembic_version SET version_num = '9999'")
            await storage.write(lambda conn: conn.execute(bump))
            return storage.description

    where = asyncio.run(newer())
    result = herald("insights")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"herald: the database {where} is at schema revision 9999, which this Herald does not know: it was "
        "migrated by a newer Herald. Upgrade Herald (or use another database).\n"
    )


@pytest.mark.sqlite_itself  # schema_versions: how releases before Alembic versioned state.db
async def test_a_legacy_schema_newer_than_this_herald_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_versions VALUES ('agent', 99)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew, match="newer than this Herald"):
        async with open_store(tmp_path / "state.db"):
            pass


@pytest.mark.sqlite_itself  # a state.db of a release before Alembic
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
    async with open_store(tmp_path / "state.db") as store:
        old = await store.sessions.get("old")
    assert old is not None and old.memory_scope == "owner" and old.compress_failures == 0


async def test_sessions_are_stored_as_created_and_listed_most_recent_first(store: SessionStore) -> None:
    await new_session(store, "s1", "chat:a")
    created = await store.sessions.get("s1")
    assert created is not None and created.system_prompt == PROMPT and created.message_count == 0
    await new_session(store, "s2", "chat:b")
    await store.messages.append("s1", [Message(role="user", content="hi")])  # s1 is used last
    assert [s.id for s in await store.sessions.recent()] == ["s1", "s2"]
    assert [s.id for s in await store.sessions.of_key("chat:b")] == ["s2"]
    latest = await store.sessions.latest()
    assert latest is not None and latest.id == "s1"
    assert await store.sessions.latest("chat:none") is None and await store.sessions.get("none") is None
    await store.sessions.set_title("s2", "Second")
    await store.sessions.set_todos("s2", [{"id": "1", "content": "write", "status": "pending"}])
    await store.sessions.set_compression_state("s2", failures=2, retry_at=99.5)
    second = await store.sessions.get("s2")
    assert second is not None and second.title == "Second"
    assert (second.compress_failures, second.compress_retry_at) == (2, 99.5)
    assert await store.sessions.todos("s2") == [{"id": "1", "content": "write", "status": "pending"}]
    assert await store.sessions.todos("none") == []


async def test_messages_round_trip_with_payloads(store: SessionStore) -> None:
    await new_session(store)
    call = ToolCall(id="t1", name="todo", arguments_json='{"b":1,"a":2}')
    stored = await store.messages.append(
        "s1",
        [
            Message(role="user", content="hi", payload={"role": "user"}, payload_api="anthropic"),
            Message(role="assistant", content="", tool_calls=(call,)),
            Message(role="tool", content="ok", tool_call_id="t1", tool_name="todo", is_error=True),
        ],
    )
    loaded = await store.messages.load("s1")
    assert loaded == stored
    assert [m.role for m in loaded] == ["user", "assistant", "tool"]
    assert [m.position for m in loaded] == [1.0, 2.0, 3.0]
    assert loaded[0].payload == {"role": "user"} and loaded[0].payload_api == "anthropic"
    assert loaded[1].tool_calls == (call,) and loaded[1].tool_calls[0].arguments_json == '{"b":1,"a":2}'
    assert loaded[2].is_error and loaded[2].tool_call_id == "t1" and not loaded[0].is_error
    session = await store.sessions.get("s1")
    assert session is not None and session.message_count == 3


async def test_concurrent_appends_to_one_session_never_share_a_position(store: SessionStore) -> None:
    await new_session(store)
    await asyncio.gather(
        *(
            store.messages.append("s1", [Message("user", f"q{n}"), Message("assistant", f"a{n}")])
            for n in range(8)
        )
    )
    loaded = await store.messages.load("s1")
    assert [m.position for m in loaded] == [float(p) for p in range(1, 17)]
    assert all(q.content[1:] == a.content[1:] for q, a in zip(loaded[::2], loaded[1::2], strict=True))
    session = await store.sessions.get("s1")
    assert session is not None and session.message_count == 16


async def test_a_file_is_stored_once_however_many_messages_carry_it(
    store: SessionStore, storage: Storage
) -> None:
    await new_session(store)
    photo = Media.of("image", "image/png", b"\x89PNG bytes", name="a.png", tokens=100, width=2, height=1)
    await store.messages.append("s1", [Message(role="user", content="look", media=(photo,))])
    await store.messages.append("s1", [Message(role="user", content="again", media=(photo,))])
    loaded = await store.messages.load("s1")
    assert [m.media for m in loaded] == [(photo,), (photo,)]
    assert loaded[0].media[0].data == b"\x89PNG bytes" and loaded[0].media[0].width == 2
    count = sa.select(sa.func.count()).select_from(media)
    assert await storage.read(lambda conn: conn.execute(count).scalar()) == 1


async def test_compression_rewrites_atomically_and_keeps_what_it_took_out(store: SessionStore) -> None:
    await new_session(store)
    old = await store.messages.append(
        "s1", [Message("user", "first"), Message("assistant", "one"), Message("user", "second")]
    )
    summary = Message("user", "summary of first", position=1.5, meta={SUMMARY_MARK: True})
    [stored] = await store.messages.rewrite("s1", [m.id for m in old[:2] if m.id], [summary], "compressed")
    assert stored.id is not None and stored.position == 1.5
    assert [m.content for m in await store.messages.load("s1")] == ["summary of first", "second"]
    everything = await store.messages.load("s1", include_inactive=True)
    taken_out = [m for m in everything if not m.active]
    assert [m.content for m in taken_out] == ["first", "one"]
    assert all(m.meta == {"inactive_reason": "compressed"} for m in taken_out)


async def test_inactive_messages_leave_the_conversation_but_stay_searchable(store: SessionStore) -> None:
    await new_session(store)
    [first, _] = await store.messages.append(
        "s1",
        [Message(role="user", content="the zebra password"), Message(role="assistant", content="noted")],
    )
    assert first.id is not None
    await store.messages.deactivate([first.id], "compressed")
    await store.messages.deactivate([first.id], "compressed")  # idempotent
    assert [m.content for m in await store.messages.load("s1")] == ["noted"]
    hits = await store.messages.search("zebra")
    assert len(hits) == 1 and not hits[0].active and "[zebra]" in hits[0].snippet


async def test_search_treats_user_text_literally(store: SessionStore) -> None:
    await new_session(store)
    await store.messages.append("s1", [Message(role="user", content="what is C++ AND rust: NEAR* FACT-3")])
    assert len(await store.messages.search('C++ AND "rust:')) == 1
    [hit] = await store.messages.search("FACT-3")
    assert hit.snippet.endswith("[FACT-3]")
    assert await store.messages.search("") == [] and await store.messages.search("rust python") == []
    assert fts_query('a "b') == '"a" """b"'


async def test_search_puts_the_best_match_first_and_keeps_to_its_chat(store: SessionStore) -> None:
    await new_session(store, "s1", "chat:a")
    await new_session(store, "s2", "chat:b")
    filler = " ".join(f"word{n}" for n in range(60))
    await store.messages.append(
        "s1",
        [
            Message("user", f"{filler} the heron {filler}"),
            Message("assistant", "heron heron: a heron nests by water"),
        ],
    )
    await store.messages.append("s2", [Message("user", "another chat's heron")])
    hits = await store.messages.search("heron", session_key="chat:a")
    assert [(h.session_id, h.role) for h in hits] == [("s1", "assistant"), ("s1", "user")]
    assert hits[0].snippet == "[heron] [heron]: a [heron] nests by water"  # all of it: no …
    assert hits[1].snippet.count("[heron]") == 1 and len(hits[1].snippet) < len(filler)
    assert hits[1].snippet.startswith("…") and hits[1].snippet.endswith("…")  # a cut from the middle
    assert [h.session_id for h in await store.messages.search("heron", session_key="chat:b")] == ["s2"]
    assert len(await store.messages.search("heron", limit=2)) == 2
    assert [h.session_id for h in await store.messages.search("heron", current_session="s1")] == ["s2"]


async def test_usage_accumulates_per_session(store: SessionStore) -> None:
    await new_session(store)
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_tokens=100, cache_write_5m_tokens=20)
    for _ in range(2):
        request = RequestUsage("turn", "anthropic", "m", usage, 0.5, 1.0)
        await store.usage.record("s1", request, at=1000.0)
    session = await store.sessions.get("s1")
    assert session is not None
    assert (session.input_tokens, session.cache_read_tokens, session.cache_write_tokens) == (20, 200, 40)
    assert session.last_prompt_tokens == 130
    assert await store.usage.chat_request_times(session.session_key, since=0, limit=10) == [1000.0, 1000.0]
    assert session.estimated_cost == 1.0 and session.uncached_cost == 2.0


async def test_side_requests_count_without_moving_the_prompt_size(store: SessionStore) -> None:
    await new_session(store, "s1", "chat:a")
    await new_session(store, "s2", "chat:b")
    await store.usage.record("s1", RequestUsage("turn", "anthropic", "m", Usage(input_tokens=50), 0.2, 0.2))
    summary = RequestUsage("summary", "anthropic", "m", Usage(input_tokens=900, output_tokens=100), 1.0, 1.5)
    await store.usage.record("s1", summary)
    await store.usage.record("s2", RequestUsage("turn", "anthropic", "m", Usage(input_tokens=7), 0.1, 0.1))
    session = await store.sessions.get("s1")
    assert session is not None and session.last_prompt_tokens == 50 and session.input_tokens == 950
    times = await store.usage.chat_request_times("chat:a", since=0, limit=10)
    assert len(times) == 1  # summaries do not pace
    purposes = await store.usage.by_purpose("chat:a")
    assert [(p.purpose, p.requests, p.usage.input_tokens) for p in purposes] == [
        ("summary", 1, 900),
        ("turn", 1, 50),
    ]
    assert purposes[0].cost == 1.0 and purposes[0].uncached_cost == 1.5
    everything = {p.purpose: p.usage.input_tokens for p in await store.usage.by_purpose()}
    assert everything == {"summary": 900, "turn": 57}
    await store.usage.set_last_prompt_tokens("s1", 12)
    session = await store.sessions.get("s1")
    assert session is not None and session.last_prompt_tokens == 12


async def test_the_review_schedule_counts_turns_a_person_sent(store: SessionStore) -> None:
    await new_session(store)
    stored = await store.messages.append(
        "s1",
        [
            Message("user", "a real question"),
            Message("assistant", "an answer"),
            Message("user", "summary", meta={SUMMARY_MARK: True}),  # Herald wrote it in the user's role
            Message("user", "another question"),
        ],
    )
    assert await store.reviews.turns_since_review("s1") == 2
    session = await store.sessions.get("s1")
    assert session is not None
    now = session.updated_at
    assert [s.id for s in await store.reviews.idle_unreviewed(now + 1, now - 1)] == ["s1"]
    assert await store.reviews.idle_unreviewed(now - 0.5, now - 1) == []  # not idle yet
    last = stored[-1].id
    assert last is not None
    await store.reviews.mark_reviewed("s1", last)
    await store.reviews.mark_reviewed("s1", last - 3)  # a late review that covered less changes nothing
    assert await store.reviews.turns_since_review("s1") == 0
    assert await store.reviews.idle_unreviewed(now + 1, now - 1) == []
    await store.messages.append("s1", [Message("user", "a third question")])
    assert await store.reviews.turns_since_review("s1") == 1
