"""Many sessions at once: a global cap on model requests, and slow consumers never hold a stream open."""

from __future__ import annotations

import asyncio

import pytest

from agent.events import TextDelta, TurnEvent
from agent.memory import user_scope
from agent.session import SessionSpec
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until
from tests.helpers import assert_well_formed, new_session, run_turn

pytestmark = pytest.mark.each_database  # hundreds of sessions at once on the database's connections

SESSIONS = 300
CAP = 40


def spec(number: int) -> SessionSpec:
    return SessionSpec(
        session_key=f"telegram:dm:{number}",
        source="telegram",
        platform="telegram",
        memory_scope=user_scope("telegram", str(number)),
    )


@pytest.mark.slow
async def test_three_hundred_sessions_at_once_are_all_answered_in_order_under_the_cap(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    emulator.stream_delay = 0.002
    with emulator.serve_in_thread() as url:  # its own event loop, like a provider elsewhere
        # 300 turns share PostgreSQL's 20 connections; on a loaded machine one may wait its turn longer
        # than the default 10 s, which the gateway waits out and this test (the agent alone) would not.
        storage = {"connect_timeout": 120.0}
        config = make_config(url, agent={"max_concurrent_requests": CAP}, storage=storage)
        async with open_agent_runtime(config, home) as runtime:
            sessions = [(await runtime.new_session(spec(n))).record for n in range(SESSIONS)]
            results = await asyncio.gather(
                *(run_turn(runtime, s, f"question from chat {n}") for n, s in enumerate(sessions))
            )
            histories = [await runtime.store.messages.load(s.id) for s in sessions]
    assert [r.error for r in results] == [None] * SESSIONS
    for number, (result, history) in enumerate(zip(results, histories, strict=True)):
        assert [(m.role, m.content) for m in history] == [
            ("user", f"question from chat {number}"),
            ("assistant", result.text),
        ]
        assert f"to: question from chat {number}" in result.text  # each chat got its own answer
    assert len(emulator.requests) == SESSIONS
    assert emulator.max_in_flight <= CAP


async def test_a_slow_consumer_does_not_hold_the_model_stream_open(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The consumer blocks until the model call is over (its concurrency slot released): if the stream
    waited for the consumer, neither could finish and the test would time out."""
    stream_done = asyncio.Event()
    received: list[str] = []

    async def watch_model_call() -> None:
        await wait_until(lambda: received and runtime.limiter.in_flight == 0, what="the model call over")
        stream_done.set()

    async def slow_consumer(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            received.append(event.text)
            await stream_done.wait()

    emulator.script(Reply(text_tokens=600))  # about 100 streamed deltas
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        watcher = asyncio.create_task(watch_model_call())
        turn = run_turn(runtime, session, "a long answer please", slow_consumer)
        result = await asyncio.wait_for(turn, WAIT_TIMEOUT)
        await watcher
    assert "".join(received) == result.text
    assert len(received) < 10  # what piled up while the consumer waited arrived merged


async def test_a_failing_consumer_fails_the_turn_with_one_sentence_and_keeps_history_valid(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    class PlatformDown(Exception):
        pass

    async def broken_consumer(event: TurnEvent) -> None:
        raise PlatformDown("editMessageText: 502 Bad Gateway")

    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        failed = await run_turn(runtime, session, "first", broken_consumer)
        assert await runtime.store.messages.load(session.id) == []
        again = await run_turn(runtime, session, "second")
        history = await runtime.store.messages.load(session.id)
    assert failed.error == (
        "The answer could not be delivered (PlatformDown: editMessageText: 502 Bad Gateway); "
        "please send your message again."
    )
    assert again.error is None and [m.role for m in history] == ["user", "assistant"]
    assert_well_formed(emulator.requests[-1])
    assert [m["role"] for m in emulator.requests[-1].json["messages"]] == ["user"]
