"""The agent in OpenAI mode through the real openai SDK: OpenAI, DeepSeek and Claude via OpenRouter."""

from __future__ import annotations

from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.helpers import new_session, prompt_hashes, run_turn, token_hit_ratio, write_project_notes


def ask(turn: int) -> str:
    return f"Turn {turn}: " + "walk me through the next part of the deployment checklist, " * 6


async def run_chat(runtime, emulator: ProviderEmulator, turns: int) -> str:
    session = await new_session(runtime)
    for turn in range(turns):
        if turn % 4 == 3:
            emulator.script(Reply(tool_calls=[ToolUse("todo", {})]), Reply(text_tokens=150))
        else:
            emulator.script(Reply(text_tokens=200))
        result = await run_turn(runtime, session, ask(turn))
        assert result.error is None
    return session.id


async def test_openai_chat_sends_stable_bytes_with_a_per_session_cache_key(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    async with open_agent_runtime(make_config(emulator_url, "openai"), home) as runtime:
        session_id = await run_chat(runtime, emulator, 20)
        record = await runtime.store.sessions.get(session_id)
    ok = [r for r in emulator.requests if r.ok]
    assert len(prompt_hashes(ok)) == 1
    assert {r.prompt_cache_key for r in ok} == {session_id}
    assert all(r.json["stream_options"] == {"include_usage": True} for r in ok)
    assert token_hit_ratio(ok) >= 0.8  # automatic caching: hits in 128-token steps
    assert record is not None and record.cache_read_tokens == sum(r.cache_read for r in ok)
    assert record.input_tokens == sum(r.prompt_tokens - r.cache_read for r in ok)


async def test_deepseek_usage_fields_are_normalized(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    config = make_config(emulator_url, "openai", model={"name": "deepseek-chat"})
    async with open_agent_runtime(config, home) as runtime:
        session_id = await run_chat(runtime, emulator, 4)
        record = await runtime.store.sessions.get(session_id)
    ok = [r for r in emulator.requests if r.ok]
    assert record is not None and record.cache_read_tokens == sum(r.cache_read for r in ok) > 0


async def test_claude_through_openrouter_gets_placed_markers_and_cache_writes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    config = make_config(emulator_url, "openai", model={"name": "anthropic/claude-sonnet-4"})
    async with open_agent_runtime(config, home) as runtime:
        session_id = await run_chat(runtime, emulator, 8)
        record = await runtime.store.sessions.get(session_id)
    ok = [r for r in emulator.requests if r.ok]
    assert all(1 <= r.breakpoints <= 4 for r in ok)
    assert len(prompt_hashes(ok)) == 1
    assert record is not None and record.cache_write_tokens == sum(r.cache_write for r in ok) > 0
    assert token_hit_ratio(ok) >= 0.8


async def test_openai_faults_are_retried(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url, "openai"), home) as runtime:
        session = await new_session(runtime)
        emulator.fail_next(429, count=1, retry_after=0.01)
        emulator.fail_midstream("server_error", after_text="par")
        emulator.script(Reply(text="Recovered."))
        result = await run_turn(runtime, session, "hello")
    assert result.text == "Recovered."
    assert len(emulator.requests) == 3
