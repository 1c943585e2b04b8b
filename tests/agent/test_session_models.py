"""A session's provider and model are the session's: every request of it goes to that model."""

from __future__ import annotations

import pytest

from agent.providers.pool import ProviderKey
from gateway.cli.dispatch import run
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.helpers import SPEC, new_session, run_turn


async def test_a_session_keeps_its_model_when_the_configured_model_changes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "first")
    cheaper = make_config(emulator_url, model={"name": "claude-haiku-4-5"})
    async with open_agent_runtime(cheaper, home) as runtime:  # a restart with another configured model
        restored = await runtime.store.sessions.get(session.id)
        assert restored is not None
        await run_turn(runtime, restored, "second")
        fresh = await new_session(runtime)
        await run_turn(runtime, fresh, "third")
    assert [r.model for r in emulator.requests] == [
        "claude-sonnet-4-6",
        "claude-sonnet-4-6",
        "claude-haiku-4-5",
    ]
    assert emulator.requests[1].system_json == emulator.requests[0].system_json


async def test_sessions_on_one_model_share_one_client(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        sessions = [await new_session(runtime) for _ in range(3)]
        for session in sessions:
            await run_turn(runtime, session, "hello")
        other = (await runtime.new_session(SPEC, model="claude-opus-4-6")).record
        await run_turn(runtime, other, "hello")
        assert runtime.pool.size == 2
        assert runtime.pool.get(ProviderKey("anthropic", "claude-sonnet-4-6")) is runtime.agent.provider_for(
            sessions[1]
        )


async def test_a_session_whose_provider_has_no_key_fails_its_turn_with_one_sentence(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = (await runtime.new_session(SPEC, provider="openai", model="gpt-5")).record
        result = await run_turn(runtime, session, "hello")
        history = await runtime.store.messages.load(session.id)
    assert result.error == (
        "No answer: No API key for openai: set OPENAI_API_KEY in the environment or in .env in your "
        "Herald home (see `herald setup`)."
    )
    assert history == [] and emulator.requests == []


def test_continue_with_another_model_starts_a_new_session_and_says_so(
    emulator: ProviderEmulator, home: HeraldHome, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.config import set_value

    with emulator.serve_in_thread() as url:
        set_value(home.config_path, "model.base_url", url)
        assert run(["chat", "-q", "hello"]) == 0
        assert run(["chat", "-q", "again", "--continue"]) == 0
        capsys.readouterr()
        assert run(["chat", "-q", "cheaper now", "--continue", "--model", "claude-haiku-4-5"]) == 0
        switched = capsys.readouterr().err
        assert run(["chat", "-q", "and again", "--continue"]) == 0  # continues the newest session
    assert "started a new session for anthropic/claude-haiku-4-5" in switched
    assert [r.model for r in emulator.requests] == ["claude-sonnet-4-6"] * 2 + ["claude-haiku-4-5"] * 2
    assert [len(r.json["messages"]) for r in emulator.requests] == [1, 3, 1, 3]
