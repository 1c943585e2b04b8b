"""TTL ``auto`` on the wire: a chat that has paused before still reads its tail after the next pause.

The agent's clock follows the emulator's (as in ``benchmarks/cache.py``), and every answer takes 90 s
to generate: the provider writes a cache entry when it takes a request, not when its answer ends, so a
pause is counted from when the previous request was sent.
"""

from __future__ import annotations

from typing import Any

from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply
from tests.helpers import SPEC, new_session, run_turn, write_project_notes

GENERATING = 90.0  # seconds each answer takes to stream
EPOCH = 1_800_000_000.0


def slow_answers(emulator: ProviderEmulator) -> None:
    def answer(body: dict[str, Any], api: str) -> Reply:
        emulator.clock.advance(GENERATING)  # after the cache was read and written: the answer streams
        return Reply(text_tokens=150)

    emulator.responder = answer


def follow_the_emulator(runtime: Runtime, emulator: ProviderEmulator) -> None:
    runtime.agent.clock = lambda: EPOCH + emulator.clock.now()


def read_everything_it_could(request: RecordedRequest) -> bool:
    return request.oracle_tokens > 0 and request.cache_read == request.oracle_tokens


async def test_after_a_pause_the_tail_is_read_when_the_chat_paused_before(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    slow_answers(emulator)
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        follow_the_emulator(runtime, emulator)
        session = await new_session(runtime)
        await run_turn(runtime, session, "Good morning.")
        emulator.clock.advance(240)  # four minutes after the answer ended: 5.5 since the request
        await run_turn(runtime, session, "Back again.")  # the first pause: its tail had 5 minutes
        emulator.clock.advance(240)
        await run_turn(runtime, session, "After another pause.")
    first_pause, second_pause = emulator.requests[1:3]
    assert not read_everything_it_could(first_pause)  # nothing could know yet that this chat pauses
    assert read_everything_it_could(second_pause)


async def test_a_new_session_of_a_chat_that_paused_before_reads_its_tail_after_a_pause(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    slow_answers(emulator)
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        follow_the_emulator(runtime, emulator)
        earlier = await new_session(runtime)
        await run_turn(runtime, earlier, "Good morning.")
        emulator.clock.advance(600)
        await run_turn(runtime, earlier, "Back after ten minutes.")
        emulator.clock.advance(2 * 3600)  # hours later, a new session of the same chat (/new)
        session = (await runtime.new_session(SPEC)).record
        await run_turn(runtime, session, "A new topic.")
        emulator.clock.advance(20)
        await run_turn(runtime, session, "More on it.")
        emulator.clock.advance(360)
        await run_turn(runtime, session, "After a pause.")
    assert read_everything_it_could(emulator.requests[-1])
