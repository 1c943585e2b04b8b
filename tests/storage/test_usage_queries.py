"""What a home spent, read without reading its history whole: ``herald insights`` adds every request up
per purpose from the indexes of ``requests`` and ``usage_days`` alone, and reads the prompts of the
sessions it lists only (every session's totals from an index, not its row's prompt and tools); a chat's
figures (the console's page of the chat, ``/insights`` in it) are found through the chat's sessions.
The figures are exact: the same before and after retention added old requests up into days, whether a
request was sent alone or in a batch."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

from agent.db.base import Storage
from agent.prompt import SystemPrompt
from agent.store import NewSession, PurposeUsage, SessionStore
from agent.store.retention import AgentRetention
from agent.store.usage import BY_PURPOSE, BY_PURPOSE_OF_KEY
from agent.usage import RequestUsage, Usage
from gateway import insights
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.insights import SHOWN
from tests.helpers import herald_cli
from tests.query_plan_support import captured_sql, described, growing_reads

DAY = 86_400.0
PROMPT = SystemPrompt(stable="stable", context="", volatile="volatile")
# (purpose, batch, days ago, cost): costs that add up exactly, so "the same" means equal.
SPENT = [
    ("turn", False, 200, 0.5), ("turn", False, 3, 0.25), ("turn", True, 150, 0.125),
    ("turn", True, 1, 0.0625), ("summary", False, 120, 1.0), ("summary", False, 0, 0.75),
    ("cron", True, 100, 2.0),
]  # fmt: skip


async def chat(store: SessionStore, session_id: str, session_key: str) -> None:
    await store.sessions.create(
        NewSession(
            id=session_id, session_key=session_key, source="telegram", platform="telegram",
            system_prompt=PROMPT, tools_json="[]", provider="anthropic", model="m",
        )
    )  # fmt: skip


async def spend(store: SessionStore, session_id: str, scale: int) -> None:
    now = time.time()
    for number, (purpose, batch, days_ago, cost) in enumerate(SPENT, start=1):
        usage = Usage(input_tokens=10 * number * scale, output_tokens=number, cache_read_tokens=100 * scale,
                      cache_write_5m_tokens=number, cache_write_1h_tokens=scale)  # fmt: skip
        request = RequestUsage(purpose, "anthropic", "m", usage, cost * scale, 2 * cost * scale, batch=batch)
        await store.usage.record(session_id, request, at=now - days_ago * DAY)


def figures(rows: list[PurposeUsage]) -> list[tuple[Any, ...]]:
    return [(r.purpose, r.requests, r.usage, r.cost, r.uncached_cost, r.characters) for r in rows]


async def test_every_figure_per_purpose_is_the_same_after_old_requests_are_added_up_into_days(
    storage: Storage,
) -> None:
    """Each table is summed on its own before the two are added: what a purpose line shows is the sum of
    every request of that line, whichever table holds it, for the whole home and for one chat."""
    store = SessionStore(storage)
    await chat(store, "a1", "telegram:dm:1")
    await chat(store, "a2", "telegram:dm:1")  # the chat's second session (after /new)
    await chat(store, "b1", "telegram:group:-5")
    for session_id, scale in (("a1", 1), ("a2", 2), ("b1", 4)):
        await spend(store, session_id, scale)
    expected: dict[str, list[float]] = {}  # purpose line -> requests, cost (of the whole home)
    for purpose, batch, _, cost in SPENT:
        line = expected.setdefault(f"{purpose} (batch)" if batch else purpose, [0, 0.0])
        line[0] += 3
        line[1] += cost * (1 + 2 + 4)
    before = figures(await store.usage.by_purpose())
    before_of_chat = figures(await store.usage.by_purpose("telegram:dm:1"))
    assert [(f[0], f[1], f[3]) for f in before] == sorted(
        ((purpose, n, cost) for purpose, (n, cost) in expected.items()), key=lambda f: (-f[2], f[0])
    )

    rolled = await AgentRetention(storage).roll_up_usage(time.time() - 90 * DAY, batch=100)
    assert rolled == 3 * 4  # the requests 100 days old or more, of each session

    assert figures(await store.usage.by_purpose()) == before
    assert figures(await store.usage.by_purpose("telegram:dm:1")) == before_of_chat
    [group_turns] = [f for f in figures(await store.usage.by_purpose("telegram:group:-5")) if f[0] == "turn"]
    assert group_turns[1:4] == (2, Usage(4 * 10 * 3, 3, 4 * 100 * 2, 3, 4 * 2), 4 * 0.75)


def plan(conn: sa.Connection, statement: sa.Select[Any], parameters: dict[str, Any]) -> str:
    bound = statement.params(**parameters)
    sql = str(bound.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return "\n".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
    # An empty table is read whole whatever its indexes; forbid that to see whether one serves.
    conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
    return "\n".join(str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {sql}"))


async def test_a_homes_usage_is_read_from_indexes_a_chats_through_its_sessions(storage: Storage) -> None:
    everything = await storage.write(lambda conn: plan(conn, BY_PURPOSE, {}))
    key = {"session_key": "telegram:dm:1"}
    of_chat = await storage.write(lambda conn: plan(conn, BY_PURPOSE_OF_KEY, key))
    if storage.dialect == "sqlite":
        for table in ("requests", "usage_days"):
            # every entry of the index, in its order: no row of the table, no sort of every request
            assert f"SCAN {table} USING COVERING INDEX {table}_by_purpose" in everything, everything
            assert f"SEARCH {table} USING INDEX {table}_by_session (session_id=?)" in of_chat, of_chat
        assert not re.search(r"^SCAN (requests|usage_days)$", everything, re.MULTILINE), everything
        assert not re.search(r"SCAN (requests|usage_days|sessions)\b", of_chat), of_chat
    else:
        for table in ("requests", "usage_days"):
            assert f"Index Only Scan using {table}_by_purpose" in everything, everything
            assert f"{table}_by_session" in of_chat, of_chat
        assert "Seq Scan" not in everything and "Seq Scan" not in of_chat, (everything, of_chat)


@pytest.mark.sqlite_itself  # SQLite's plans
async def test_insights_reads_the_prompts_of_the_sessions_it_lists_only(home: HeraldHome) -> None:
    async with open_home_storage(home) as storage:
        store = SessionStore(storage)
        for number in range(SHOWN + 5):
            await chat(store, f"s{number:02d}", f"telegram:dm:{number}")
            await spend(store, f"s{number:02d}", number + 1)
        await AgentRetention(storage).roll_up_usage(time.time() - 90 * DAY, batch=1000)
    with captured_sql() as statements:
        shown = await herald_cli("insights")

    total = sum(cost * (number + 1) for number in range(SHOWN + 5) for *_, cost in SPENT)
    assert re.search(rf"^all {SHOWN + 5} sessions .* {total:.4f} ", shown, re.MULTILINE), shown
    prompts = [statement for statement, _ in statements if "sessions.system_prompt" in statement]
    assert prompts and all("LIMIT" in statement for statement in prompts), prompts
    reads = growing_reads(home.root / "state.db", statements)
    read_whole = {line for lines in reads.values() for line in lines}
    assert read_whole <= {
        "SCAN sessions USING INDEX sessions_by_update",  # the latest first, up to those listed
        "SCAN sessions USING COVERING INDEX sessions_by_update",  # every one's totals, none of its rows
        "SCAN requests USING COVERING INDEX requests_by_purpose",
        "SCAN usage_days USING COVERING INDEX usage_days_by_purpose",
        "SCAN cache_misses",  # every miss retention keeps, by cause
    }, described(reads)


async def test_a_chats_insights_total_every_session_of_the_chat_and_list_the_latest_only(
    storage: Storage,
) -> None:
    """``/insights`` in a chat: its five latest sessions listed, every session of that chat (and of no
    other chat) in the total, and the prompts of the listed ones only read (a chat of years stays cheap;
    before, up to 1,000 whole sessions were loaded and any beyond them left out of the total)."""
    store = SessionStore(storage)
    for number in range(8):
        await chat(store, f"a{number}", "telegram:dm:1")
        await spend(store, f"a{number}", number + 1)
    await chat(store, "b", "telegram:dm:2")
    await spend(store, "b", 100)
    with captured_sql() as statements:
        shown = await insights.report(store, "telegram:dm:1", shown=5, markdown=True)

    total = sum(cost * (number + 1) for number in range(8) for *_, cost in SPENT)
    assert re.search(rf"^all 8 sessions .* {total:.4f} ", shown, re.MULTILINE), shown
    assert len(re.findall(r"^\d{4}-\d\d-\d\d", shown, re.MULTILINE)) == 5, shown  # one line per listed
    prompts = [(sql, values) for sql, values in statements if "sessions.system_prompt" in sql]
    limits = [5 in (values.values() if isinstance(values, dict) else values) for _, values in prompts]
    assert prompts and all("LIMIT" in sql for sql, _ in prompts) and all(limits), prompts
