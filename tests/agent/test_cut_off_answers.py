"""An answer cut off by max_tokens is never passed off as complete (before, it was printed as if whole).

``agent.on_max_tokens: continue`` asks the model once to go on; ``notify`` keeps the answer as it is.
Either way an answer that is still cut off comes with one line saying so and how to raise the limit.
"""

from __future__ import annotations

import pytest

from agent.history import unanswered_turn
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.helpers import assert_well_formed, new_session, point_at, run_turn

LONG = "word " * 100  # ~125 tokens, over a 50-token limit


async def test_a_cut_off_answer_is_continued_once_and_shown_as_one(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = make_config(emulator_url, model={"max_tokens": 50})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        emulator.script(Reply(text=LONG), Reply(text=" and that is all."))
        result = await run_turn(runtime, session, "tell me everything")
        history = await runtime.store.messages.load(session.id)
        emulator.script(Reply(text="Next answer."))
        assert (await run_turn(runtime, session, "next")).text == "Next answer."
    _, second, _ = emulator.requests
    cut = LONG[: 50 * 4]
    assert result.text == cut + " and that is all." and result.notices == ()
    assert "Continue exactly where it stopped" in str(second.json["messages"][-1])
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert unanswered_turn(history) == []
    for request in emulator.requests:
        assert_well_formed(request)


async def test_an_answer_still_cut_off_says_so_and_how_to_raise_the_limit(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = make_config(emulator_url, model={"max_tokens": 50})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        emulator.script(Reply(text=LONG), Reply(text=LONG))
        result = await run_turn(runtime, session, "tell me everything")
    assert len(emulator.requests) == 2  # continued once, not more
    [notice] = result.notices
    assert "cut off at the model.max_tokens limit of 50 tokens" in notice
    assert "herald config set model.max_tokens 100" in notice


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_notify_keeps_the_answer_and_never_runs_a_cut_off_tool_call(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, provider: str
) -> None:
    config = make_config(emulator_url, provider, model={"max_tokens": 50}, agent={"on_max_tokens": "notify"})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        emulator.script(
            Reply(text="Let me check.", tool_calls=[ToolUse("todo", {})], stop_reason="max_tokens")
        )
        result = await run_turn(runtime, session, "plan it")
        history = await runtime.store.messages.load(session.id)
    assert len(emulator.requests) == 1 and result.text == "Let me check."
    [notice] = result.notices
    assert "cut off" in notice
    assert [(m.role, m.tool_calls) for m in history] == [("user", ()), ("assistant", ())]


def test_the_cli_prints_the_cut_off_line_on_stderr(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald
) -> None:
    point_at(home, served)
    herald("config", "set", "model.max_tokens", "50")
    herald("config", "set", "agent.on_max_tokens", "notify")
    emulator.script(Reply(text=LONG))
    result = herald("chat", "-q", "tell me everything")
    assert result.returncode == 0 and result.stdout == LONG[:200] + "\n"
    assert "cut off at the model.max_tokens limit of 50 tokens" in result.stderr
