"""Property-based tests: arbitrary text (any Unicode, control characters, lone surrogates, very long
lines) through storing, prompt building and compression boundaries.

Invariants: nothing raises, what is stored is what was sent, and a history stays valid (roles
alternate on the wire, no tool call without its result, an unanswered turn is found exactly).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.compression.boundaries import choose_boundaries, prune_tool_outputs, repair_tool_pairs
from agent.files.text import valid_text
from agent.history import unanswered_turn
from agent.memory import OWNER_SCOPE
from agent.model.messages import Message, ToolCall, tool_result
from agent.prompt import PromptInputs, SystemPrompt, build_system_prompt
from agent.providers.anthropic_provider import AnthropicProvider, group_wire_messages
from agent.untrusted.scan import scan_for_injection
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.helpers import new_session, run_turn, without_markers
from tests.state_support import files_bank

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WIRE = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Any code point, surrogates included; sometimes a line thousands of characters long.
ANY_CHAR = st.characters(codec=None, exclude_categories=())
SHORT_TEXT = st.text(ANY_CHAR, max_size=40)
ANY_TEXT = st.one_of(
    SHORT_TEXT,
    st.text(ANY_CHAR, min_size=1, max_size=3).map(lambda s: s * 3000),
    st.text(st.sampled_from("\x00\x07\x1b\r\n\t\u202e\ufeff\udcff\ud800 ab§"), max_size=60),
)


def encodes(text: str) -> bool:
    text.encode("utf-8")  # raises on anything that could not be stored or sent
    return True


# -- storing --------------------------------------------------------------------------------------


@pytest.mark.slow
@WIRE
@given(text=ANY_TEXT)
def test_what_is_stored_is_what_was_sent(
    text: str, emulator: ProviderEmulator, served: str, home: HeraldHome
) -> None:
    async def one_turn() -> None:
        async with open_agent_runtime(make_config(served), home) as runtime:
            session = await new_session(runtime)
            result = await run_turn(runtime, session, text)
            [user, answer] = await runtime.store.messages.load(session.id)
        assert result.error is None
        assert user.content == valid_text(text)
        sent = emulator.requests[-1].json["messages"]
        assert without_markers(sent[-1]) == user.payload
        assert answer.content == result.text

    asyncio.run(one_turn())


# -- prompt building ------------------------------------------------------------------------------


PROVIDER = AnthropicProvider(model="claude-sonnet-4-6", api_key="x", base_url="http://127.0.0.1:9", timeout=1)


@FAST
@given(identity=ANY_TEXT, message=ANY_TEXT, chat=SHORT_TEXT, memory=st.binary(max_size=5000))
def test_any_prompt_source_builds_a_prompt_that_encodes_the_same_way_twice(
    identity: str, message: str, chat: str, memory: bytes, tmp_path_factory: Any
) -> None:
    directory: Path = tmp_path_factory.mktemp("memories")
    (directory / "MEMORY.md").write_bytes(memory)  # a file edited by anyone, in any encoding
    snapshot = asyncio.run(files_bank(directory).store(OWNER_SCOPE).snapshot())
    inputs = PromptInputs(
        identity=valid_text(identity),
        tool_guidance=(),
        skills_index="",
        platform_hint="You are talking with the user in a terminal.",
        system_message=valid_text(message),
        project_context="",
        memory_snapshot=snapshot.text,
        started_on=dt.date(2026, 1, 1),
        model="claude-sonnet-4-6",
        provider="anthropic",
        chat_context=valid_text(chat),
    )
    prompt = build_system_prompt(inputs)
    assert prompt == build_system_prompt(inputs)
    assert SystemPrompt.from_json(prompt.to_json()) == prompt
    assert len(snapshot.text) <= 2200 + 200 and encodes(prompt.to_json())
    assert all(encodes(warning) and "\n" not in warning for warning in snapshot.warnings)
    assert isinstance(scan_for_injection(valid_text(identity)), list)


# -- compression boundaries and turns -------------------------------------------------------------

ids = itertools.count()


@st.composite
def turn(draw: st.DrawFn, answered: bool = True) -> list[Message]:
    """One turn as the agent stores it: the user's text, tool rounds, and (if answered) the answer."""
    messages = [Message("user", valid_text(draw(ANY_TEXT)))]
    for _ in range(draw(st.integers(0, 2))):
        calls = tuple(ToolCall(f"call_{next(ids)}", "todo", "{}") for _ in range(draw(st.integers(1, 2))))
        messages.append(Message("assistant", valid_text(draw(SHORT_TEXT)), tool_calls=calls))
        messages.extend(tool_result(call, valid_text(draw(ANY_TEXT))) for call in calls)
    if answered:
        messages.append(Message("assistant", valid_text(draw(ANY_TEXT))))
    return messages


def flat(turns: list[list[Message]]) -> list[Message]:
    return list(itertools.chain.from_iterable(turns))


def numbered(messages: list[Message]) -> list[Message]:
    return [Message(**{**m.__dict__, "id": i + 1, "position": float(i + 1)}) for i, m in enumerate(messages)]


def assert_valid_wire(messages: list[Message]) -> None:
    wire = group_wire_messages(messages, PROVIDER.wire_message)
    roles = [m["role"] for m in wire]
    assert roles[:1] == ["user"] and all(a != b for a, b in itertools.pairwise(roles)), roles
    for before, after in itertools.pairwise(wire):
        calls = {b["id"] for b in before["content"] if b.get("type") == "tool_use"}
        results = {b["tool_use_id"] for b in after["content"] if b.get("type") == "tool_result"}
        assert calls == results
    assert encodes(json.dumps(wire, ensure_ascii=False))


@FAST
@given(
    history=st.lists(turn(), min_size=1, max_size=8).map(lambda turns: numbered(flat(turns))),
    budget=st.integers(0, 5000),
    protect=st.integers(1, 12),
)
def test_compression_boundaries_keep_the_history_valid(
    history: list[Message], budget: int, protect: int
) -> None:
    bounds = choose_boundaries(history, budget, protect)
    if bounds is None:
        return
    head, tail = history[: bounds.head_end], history[bounds.tail_start :]
    assert 0 < bounds.head_end <= bounds.tail_start < len(history)
    assert tail[0].role == "assistant" and any(m.role == "user" for m in tail)
    summary = Message("user", "[summary]", meta={"summary": True})
    assembled = repair_tool_pairs([*head, summary, *tail])
    assert_valid_wire(assembled)
    pruned = prune_tool_outputs(history, bounds.tail_start)
    assert [m.role for m in pruned] == [m.role for m in history]


@FAST
@given(
    done=st.lists(turn(), max_size=4).map(flat),
    cut=turn(answered=False),
    answered=st.booleans(),
)
def test_an_unanswered_turn_is_found_exactly(done: list[Message], cut: list[Message], answered: bool) -> None:
    if answered:
        assert unanswered_turn(done) == []
        return
    assert unanswered_turn([*done, *cut]) == cut
    if done:
        assert_valid_wire([*done, Message("user", "next")])
