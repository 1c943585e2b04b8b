"""The spend gate in the agent, on a real runtime against the emulator: every purpose is charged to the
current charge, and a compression or a sub-agent over a limit is skipped, never sent."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from agent.db.schema import requests
from agent.spending.charge import Charge, Limit, Scope, charging
from agent.spending.windows import day_window
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.helpers import compress, new_session, run_turn

CHAT = Scope("chat", "test:chat")
PERSON = Scope("person", "test:42")


async def spent_by_purpose(runtime: Runtime) -> dict[str, float]:
    query = sa.select(requests.c.purpose, sa.func.sum(requests.c.estimated_cost)).group_by(requests.c.purpose)
    return await runtime.storage.read(lambda conn: {p: float(c) for p, c in conn.execute(query).all()})


async def window(runtime: Runtime, scope: Scope) -> float:
    period = day_window(runtime.spending.clock(), runtime.spending.zone).id
    found = await runtime.store.spending.spent([(scope.key, period)])
    return found.get((scope.key, period), 0.0)


async def test_a_turns_sub_agents_and_compression_count_in_the_turns_scopes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(
        Reply(tool_calls=[ToolUse("delegate", {"tasks": ["look left", "look right"]})]),
        Reply(text="left: clear"),
        Reply(text="right: clear"),
        Reply(text="Both sides are clear."),
    )  # then the emulator's default answers (the summary's too)
    config = make_config(emulator_url, compression={"protect_last_n": 2})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        with charging(Charge((CHAT, PERSON))):
            result = await run_turn(runtime, session, "look both ways")
            for number in range(6):
                await run_turn(runtime, session, f"more {number}")
            outcome = await compress(runtime, session)
        purposes = await spent_by_purpose(runtime)
        chat, person = await window(runtime, CHAT), await window(runtime, PERSON)
        bot = await window(runtime, Scope("bot"))
    assert result.text == "Both sides are clear." and outcome is not None and outcome.method == "summary"
    assert set(purposes) == {"turn", "subagent", "summary"}
    assert chat == person == pytest.approx(sum(purposes.values()))  # every purpose, in the turn's scopes
    assert bot == 0.0  # the charge named no bot scope: nothing else is charged


async def test_a_compression_over_a_limit_is_skipped_not_sent_and_not_a_failure(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = make_config(emulator_url, compression={"protect_last_n": 2})
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        for number in range(8):
            await run_turn(runtime, session, f"message {number}")
        asked = len(emulator.requests)
        with charging(Charge((Scope("chat", "test:chat", (Limit("day", 0.0),)),))):
            outcome = await compress(runtime, session)
        stored = await runtime.store.sessions.get(session.id)
    assert outcome is not None and outcome.method == "skipped"
    assert outcome.refused is not None and outcome.refused.scope.key == "chat:test:chat"
    assert "spend limit of chat:test:chat ($0.00 per day) is reached" in outcome.line()
    assert len(emulator.requests) == asked  # the summary was never sent
    assert stored is not None and stored.compress_failures == 0 and stored.compress_retry_at is None
