"""Sub-agents and background reviews send the session's own prompt bytes, so they read its cache."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from agent.db.schema import requests
from agent.session import SessionSpec
from agent.side import CHILD_PREAMBLE, REVIEW_TASK, review
from agent.store import SessionRecord
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.emulator.blocks import anthropic_layout
from tests.helpers import new_session, prompt_hashes, run_turn, write_project_notes

TASKS = ["Summarise chapter one.", "List the open questions.", "Draft a title."]


def first_text(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"][0].get("text", ""))


def last_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"][-1])


def session_spec_of(session: SessionRecord) -> SessionSpec:
    """A spec for another session of the same chat and memory."""
    return SessionSpec(
        session.session_key, session.source, session.platform, memory_scope=session.memory_scope
    )


def prompt_tokens(request: RecordedRequest) -> int:
    """Tokens of the tool list and the system blocks: what every request of the session shares."""
    body = request.json
    layout = anthropic_layout(body)
    return layout.positions[len(body.get("tools", [])) + len(body["system"]) - 1].cum_tokens


class Model:
    """Children answer their task; the parent delegates once, then sums up; reviews save a fact."""

    def __init__(self, child_calls: list[ToolUse] | None = None) -> None:
        self.child_calls = child_calls or []

    def __call__(self, body: dict[str, Any], api: str) -> Reply | None:
        first, last = first_text(body), last_text(body)
        if first.startswith("[Herald: you are a sub-agent"):
            if self.child_calls and "tool_result" not in last:
                return Reply(tool_calls=self.child_calls)
            return Reply(text=f"Result for: {first.removeprefix(CHILD_PREAMBLE)}")
        if "[Herald: background review]" in last:
            content = "The user prefers short answers."
            return Reply(
                tool_calls=[ToolUse("memory", {"action": "add", "target": "user", "content": content})]
            )
        if "background review" in json.dumps(body["messages"][-2:]) and "tool_result" in last:
            return Reply(text="Saved one preference.")
        if "please delegate" in last:
            return Reply(tool_calls=[ToolUse("delegate", {"tasks": TASKS})])
        if "tool_result" in last:
            return Reply(text="Here is what the sub-agents found.")
        return Reply(text_tokens=200)


async def test_three_children_and_a_review_read_the_parents_prompt_from_cache(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    emulator.responder = Model()
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "Hello, I keep my answers short.")
        result = await run_turn(runtime, session, "There is a lot to do, please delegate it.")
        messages = await runtime.store.messages.load(session.id)
        outcome = await review(runtime.agent, session, max_iterations=3)
        query = sa.select(requests.c.purpose).order_by(requests.c.id)
        purposes = await runtime.storage.read(lambda conn: list(conn.execute(query).scalars()))
        later = (await runtime.new_session(session_spec_of(session))).record
    assert result.error is None and outcome.error is None
    tool_result = next(m for m in messages if m.role == "tool" and m.tool_name == "delegate")
    for task in TASKS:
        assert f"Result for: {task}" in tool_result.content
    assert "from cache" in tool_result.content

    children = [r for r in emulator.requests if first_text(r.json).startswith("[Herald: you are a sub-agent")]
    reviews = [r for r in emulator.requests if REVIEW_TASK in last_text(r.json)]
    assert len(children) == 3 and len(reviews) == 1
    parent = emulator.requests[0]
    assert len(prompt_hashes([parent, *children, *reviews])) == 1  # the same system and tool bytes
    for side in [*children, *reviews]:
        assert side.cache_read >= prompt_tokens(parent) > 0
    history_tokens = reviews[0].prompt_tokens - prompt_tokens(parent)
    assert reviews[0].cache_read > prompt_tokens(parent) + history_tokens // 2  # the transcript too
    assert purposes.count("subagent") == 3 and purposes.count("review") == 2
    # The review's memory write shows up in the next session, never in the current prompt.
    assert "short answers" not in session.system_prompt.volatile
    assert "The user prefers short answers." in later.system_prompt.volatile


async def test_the_turn_after_a_review_reads_the_history_through_its_last_answer_from_cache(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The review sent the history up to the last answer; the chat's next turn reads all of it (the
    oracle: the longest prefix an earlier request sent), not only up to the message before it."""
    write_project_notes()
    emulator.responder = Model()
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "Hello, I keep my answers short.")
        await run_turn(runtime, session, "Tell me about the weather.")
        outcome = await review(runtime.agent, session, max_iterations=3)
        await run_turn(runtime, session, "And tomorrow?")
    assert outcome.error is None
    after_review = emulator.requests[-1]
    assert "And tomorrow?" in last_text(after_review.json)
    assert after_review.oracle_tokens > 0
    assert after_review.cache_read == after_review.oracle_tokens


async def test_children_are_refused_tools_they_may_not_use_and_cannot_delegate_again(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = Model(
        child_calls=[ToolUse("delegate", {"tasks": ["more"]}), ToolUse("todo", {"todos": []})]
    )
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "please delegate")
        todos = await runtime.store.sessions.todos(session.id)
    child_followups = [
        r
        for r in emulator.requests
        if first_text(r.json).startswith("[Herald:") and "tool_result" in last_text(r.json)
    ]
    assert len(child_followups) == 3
    for request in child_followups:
        results = request.json["messages"][-1]["content"]
        assert all(block.get("is_error") for block in results)
        assert "not available in this context" in json.dumps(results)
    assert todos == []


async def test_delegation_limits_are_enforced(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    too_many = [f"task {n}" for n in range(9)]
    emulator.script(Reply(tool_calls=[ToolUse("delegate", {"tasks": too_many})]), Reply(text="Understood."))
    async with open_agent_runtime(make_config(emulator_url, delegate={"max_children": 4}), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "do nine things")
        messages = await runtime.store.messages.load(session.id)
    result = next(m for m in messages if m.role == "tool")
    assert result.is_error and "At most 4 tasks per delegate call" in result.content
    assert len(emulator.requests) == 2  # no child ran
