"""The agent against the emulator through the real anthropic SDK: the cache invariants, end to end."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.events import Retrying, TextDelta
from agent.tools.registry import Refuse
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.waiting import WAIT_TIMEOUT
from tests.helpers import (
    SPEC,
    EventLog,
    new_session,
    prompt_hashes,
    run_turn,
    token_hit_ratio,
    write_project_notes,
)
from tests.state_support import put_skill, read_memory, skill_md


def ask(turn: int) -> str:
    """A user message of realistic size (~100 tokens)."""
    return f"Turn {turn}: " + "please explain the next part of the migration plan in detail, " * 6


def todo_call(step: int) -> Reply:
    todos = [{"id": str(step), "content": f"step {step}", "status": "in_progress"}]
    return Reply(tool_calls=[ToolUse("todo", {"todos": todos, "merge": True})])


async def test_twenty_turns_send_identical_prompt_bytes_and_read_the_cache(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Acceptance: identical system/tools bytes for 20 turns with tools, token hit ratio >= 0.9.

    A project context file makes the prompt realistic: without one Herald's prompt (~900 tokens) is
    under claude-sonnet-4-6's 2048-token minimum and the first few requests cannot be cached at all.
    """
    write_project_notes()
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        for turn in range(20):
            if turn % 4 == 3:
                emulator.script(todo_call(turn), Reply(text_tokens=150))
            else:
                emulator.script(Reply(text_tokens=200))
            result = await run_turn(runtime, session, ask(turn))
            assert result.error is None
            session = await runtime.store.sessions.get(session.id) or session
    ok = [r for r in emulator.requests if r.ok]
    assert len(ok) == 25  # 20 turns + 5 tool round trips
    assert len(prompt_hashes(ok)) == 1
    assert all(r.breakpoints <= 4 for r in ok)
    assert token_hit_ratio(ok) >= 0.9


async def test_restart_restores_the_session_and_resends_the_same_bytes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = make_config(emulator_url)
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        for turn in range(6):
            emulator.script(Reply(text_tokens=250))
            await run_turn(runtime, session, ask(turn))
    before = [r for r in emulator.requests if r.ok]

    (home.root / "SOUL.md").write_text("A completely different identity written after the session started.")
    async with open_agent_runtime(config, home) as runtime:  # a new store connection and a new SDK client
        restored = await runtime.store.sessions.latest(SPEC.session_key)
        assert restored is not None and restored.id == session.id
        await run_turn(runtime, restored, "message after restart")
    after = emulator.requests[-1]

    assert prompt_hashes([*before, after]) == prompt_hashes(before)
    # the replayed history is the previous request's messages byte for byte (markers aside)
    previous, current = before[-1].json["messages"], after.json["messages"]
    strip = _without_markers
    assert strip(current[: len(previous)]) == strip(previous)
    assert after.cache_read == after.oracle_tokens > 0


def _without_markers(messages: list[dict]) -> str:
    def clean(value: object) -> object:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(messages))


async def test_memory_write_keeps_the_running_prompt_and_reaches_the_next_session(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.script(
            Reply(
                tool_calls=[ToolUse("memory", {"action": "add", "target": "user", "content": "Prefers tea."})]
            ),
            Reply(text="Noted."),
            Reply(text="Sure."),
        )
        await run_turn(runtime, session, "Remember that I prefer tea.")
        await run_turn(runtime, session, "Thanks.")
        first_session = [r for r in emulator.requests if r.ok]
        assert len(prompt_hashes(first_session)) == 1
        assert "Prefers tea." not in first_session[-1].system_json
        assert "Prefers tea." in await read_memory(home)

        fresh = await new_session(runtime)
        await run_turn(runtime, fresh, "Hello again.")
    assert "Prefers tea." in emulator.requests[-1].system_json


@pytest.mark.parametrize("policy", ["layered", "system_and_3"])
async def test_never_more_than_four_breakpoints_in_long_tool_loops(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, policy: str
) -> None:
    config = make_config(emulator_url, prompt_caching={"policy": policy})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        for turn in range(3):
            calls = [ToolUse("todo", {}) for _ in range(6)]  # 6 parallel reads per step, 4 steps
            emulator.script(*[Reply(tool_calls=calls)] * 4, Reply(text="done"))
            result = await run_turn(runtime, session, f"go {turn}")
            assert result.error is None
    ok = [r for r in emulator.requests if r.ok]
    assert len(ok) == 15 and max(r.breakpoints for r in ok) <= 4


async def test_layered_policy_reads_across_tool_loops_longer_than_the_lookback(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """A step adding 25 blocks defeats a lookback-only policy; ours marks where the last request ended."""
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        calls = [ToolUse("todo", {}) for _ in range(12)]  # 12 tool_use + 12 tool_result blocks per step
        emulator.script(Reply(tool_calls=calls), Reply(tool_calls=calls), Reply(text="done"))
        await run_turn(runtime, session, "work")
    loop_requests = [r for r in emulator.requests if r.ok][1:]
    assert all(r.cache_read == r.oracle_tokens for r in loop_requests)


async def test_provider_faults_are_retried_honouring_retry_after(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.fail_next(429, count=1, retry_after=0.05)
        emulator.fail_next(529, count=1)
        emulator.script(Reply(text="Finally."))
        events = EventLog()
        result = await run_turn(runtime, session, "hello", events)
    assert result.error is None and result.text == "Finally."
    retries = [e for e in events.events if isinstance(e, Retrying)]
    assert len(retries) == 2 and retries[0].delay == pytest.approx(0.05)
    assert [r.status for r in emulator.requests] == [429, 529, 200]


async def test_a_failure_mid_stream_is_retried_and_the_partial_text_discarded(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.fail_midstream("overloaded_error", after_text="Half an ans")
        emulator.script(Reply(text="The whole answer."))
        events = EventLog()
        result = await run_turn(runtime, session, "hello", events)
        stored = await runtime.store.messages.load(session.id)
    assert result.text == "The whole answer."
    kinds = [type(e).__name__ for e in events.events]
    assert kinds.index("Retrying") > kinds.index("TextDelta")
    assert next(e for e in events.events if isinstance(e, Retrying)).discard_partial
    assert [m.content for m in stored] == ["hello", "The whole answer."]
    assert "".join(e.text for e in events.events if isinstance(e, TextDelta)).endswith("The whole answer.")


async def test_exhausted_retries_give_one_sentence_and_leave_history_consistent(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.script(Reply(text="First answer."))
        await run_turn(runtime, session, "first")
        # the model calls a tool; while the tool runs the provider goes down for every retry
        original = runtime.store.sessions.todos

        async def todos_then_outage(session_id: str) -> list[dict]:
            emulator.fail_next(529, count=4)
            return await original(session_id)

        runtime.store.sessions.todos = todos_then_outage  # type: ignore[method-assign]
        emulator.script(Reply(tool_calls=[ToolUse("todo", {})]))
        failed = await run_turn(runtime, session, "second")
        runtime.store.sessions.todos = original  # type: ignore[method-assign]
        assert failed.error == (
            "No answer: the model provider is overloaded (4 attempts). Please try again in a minute."
        )
        active = await runtime.store.messages.load(session.id)
        assert [(m.role, m.content) for m in active] == [("user", "first"), ("assistant", "First answer.")]
        everything = await runtime.store.messages.load(session.id, include_inactive=True)
        inactive = [m for m in everything if not m.active]  # kept in the database, out of the conversation
        assert [m.role for m in inactive] == ["user", "assistant", "tool"] and inactive[0].content == "second"

        emulator.requests.clear()
        emulator.script(Reply(text="Back."))
        ok = await run_turn(runtime, session, "second, again")
    assert ok.text == "Back."
    resent = emulator.requests[-1].json["messages"]
    assert [m["role"] for m in resent] == ["user", "assistant", "user"]
    assert emulator.requests[-1].cache_read > 0


async def test_a_bad_request_is_not_retried(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.fail_next(400, count=1)
        result = await run_turn(runtime, session, "hello")
    assert result.error is not None and result.error.startswith("The model provider rejected the request")
    assert len(emulator.requests) == 1


async def test_parallel_tool_calls_run_concurrently_and_keep_their_order(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.script(
            Reply(
                tool_calls=[
                    ToolUse("todo", {"todos": [{"id": "1", "content": "a", "status": "pending"}]}),
                    ToolUse("no_such_tool", {}),
                    ToolUse("skills_list", {}),
                ]
            ),
            Reply(text="ok"),
        )
        await run_turn(runtime, session, "go")
        messages = await runtime.store.messages.load(session.id)
    roles = [m.role for m in messages]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "assistant"]
    calls = messages[1].tool_calls
    assert [m.tool_call_id for m in messages[2:5]] == [c.id for c in calls]
    assert "Unknown tool 'no_such_tool'" in messages[3].content and messages[3].is_error
    # Anthropic wire: all three results in one user message, in call order
    last = emulator.requests[-1].json["messages"]
    assert [b["tool_use_id"] for b in last[2]["content"]] == [c.id for c in calls]


async def test_iteration_limit_stops_with_a_note(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = make_config(emulator_url, agent={"max_iterations": 3})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        emulator.script(*[Reply(tool_calls=[ToolUse("todo", {})])] * 3)
        result = await run_turn(runtime, session, "loop forever")
        messages = await runtime.store.messages.load(session.id)
    assert "stopped after 3 tool steps" in result.text
    assert messages[-1].role == "assistant" and len(emulator.requests) == 3


async def test_cancelling_a_turn_leaves_no_dangling_tool_call(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        started = asyncio.Event()
        original = runtime.store.sessions.todos

        async def slow_todos(session_id: str) -> list[dict]:
            started.set()
            await asyncio.sleep(30)
            return await original(session_id)

        runtime.store.sessions.todos = slow_todos  # type: ignore[method-assign]
        emulator.script(Reply(tool_calls=[ToolUse("todo", {})]))
        task = asyncio.create_task(run_turn(runtime, session, "start something long"))
        await asyncio.wait_for(started.wait(), WAIT_TIMEOUT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        messages = await runtime.store.messages.load(session.id)
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[-1].content == "(The user cancelled this turn.)" and not messages[-1].tool_calls
        runtime.store.sessions.todos = original  # type: ignore[method-assign]
        emulator.script(Reply(text="ok"))
        assert (await run_turn(runtime, session, "next")).text == "ok"


async def test_activating_a_skill_appends_its_text_and_keeps_the_prompt(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    await put_skill(
        home, "ops/deploy", {"SKILL.md": skill_md("deploy", "Ship a release", "Run make release.\n")}
    )
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        assert "deploy: Ship a release" in session.system_prompt.stable
        emulator.script(
            Reply(tool_calls=[ToolUse("skill_view", {"name": "deploy"})]), Reply(text="Deploying.")
        )
        await run_turn(runtime, session, "deploy please")
    first, second = emulator.requests
    assert "Run make release." in json.dumps(second.json["messages"][-1])
    assert "Run make release." not in second.system_json
    assert prompt_hashes([first, second]) == prompt_hashes([first])


async def test_session_search_finds_earlier_sessions(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        old = await new_session(runtime)
        await run_turn(runtime, old, "My boat is called Sea Otter.")
        current = await new_session(runtime)
        emulator.script(
            Reply(tool_calls=[ToolUse("session_search", {"query": "boat"})]), Reply(text="Found it.")
        )
        await run_turn(runtime, current, "What is my boat called?")
        messages = await runtime.store.messages.load(current.id)
    result = next(m for m in messages if m.role == "tool")
    assert "Sea Otter" in result.content and "My boat is called" in result.content


async def test_session_search_never_crosses_into_another_chat(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    from agent.memory import user_scope
    from agent.session import SessionSpec

    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        other_chat = (
            await runtime.new_session(
                SessionSpec("telegram:42", "telegram", "telegram", memory_scope=user_scope("telegram", "42"))
            )
        ).record
        await run_turn(runtime, other_chat, "My PIN is 4711, keep it secret.")
        mine = await new_session(runtime)
        emulator.script(Reply(tool_calls=[ToolUse("session_search", {"query": "PIN"})]), Reply(text="None."))
        await run_turn(runtime, mine, "What is the PIN?")
        messages = await runtime.store.messages.load(mine.id)
    result = next(m for m in messages if m.role == "tool")
    assert "4711" not in result.content and "No past messages match" in result.content


async def test_usage_is_recorded_per_request(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        for turn in range(3):
            await run_turn(runtime, session, f"hi {turn}")
        record = await runtime.store.sessions.get(session.id)
    assert record is not None
    sent = [r for r in emulator.requests if r.ok]
    assert record.cache_read_tokens == sum(r.cache_read for r in sent) > 0
    assert record.cache_write_tokens == sum(r.cache_write for r in sent)
    assert record.input_tokens == sum(r.input_tokens for r in sent)
    assert 0 < record.estimated_cost < record.uncached_cost


async def test_cancelling_while_the_answer_streams_keeps_history_consistent(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.hold_streams()  # the answer stops half-way until the turn is cancelled
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        first_text = asyncio.Event()

        async def on_event(event: object) -> None:
            if isinstance(event, TextDelta):
                first_text.set()

        emulator.script(Reply(text_tokens=400))
        task = asyncio.create_task(run_turn(runtime, session, "tell me a long story", on_event))
        await asyncio.wait_for(first_text.wait(), WAIT_TIMEOUT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        messages = await runtime.store.messages.load(session.id)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "tell me a long story"),
        ("assistant", "(The user cancelled this turn.)"),
    ]


async def test_a_refused_tool_stays_in_the_schema_but_does_not_run(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        emulator.script(todo_call(1), Reply(text="I could not use it."))
        async with runtime.locks.hold(session.session_key) as lease:
            await runtime.agent.run_turn(lease, session, "plan it", gate=Refuse(frozenset({"todo"})))
        messages = await runtime.store.messages.load(session.id)
        todos = await runtime.store.sessions.todos(session.id)
    result = next(m for m in messages if m.role == "tool")
    assert result.is_error and "not available in this context" in result.content
    assert todos == []  # the tool did not run
    assert len(prompt_hashes([r for r in emulator.requests if r.ok])) == 1  # same tool list bytes
