"""Interrupted turns: a process killed mid-answer leaves no broken history, and a stopped answer is
still counted in `insights`.

Before, the next turn after a kill sent two user messages in a row, and the usage of a cancelled
stream was never recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import pytest

from agent.events import TextDelta
from agent.history import unanswered_turn
from agent.model.messages import Message, ToolCall, tool_result
from gateway.cli.chat import DRAIN_SECONDS
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import PROCESS_TIMEOUT, WAIT_TIMEOUT, wait_until_sync
from tests.helpers import HERALD, assert_well_formed, new_session, point_at, run_turn

pytestmark = pytest.mark.each_database  # a history left by a killed process, repaired in the database

CALL = ToolCall("call_1", "todo", "{}")


def test_an_unanswered_turn_is_found_back_to_its_user_message() -> None:
    answered = [Message("user", "a"), Message("assistant", "b")]
    tools = [Message("assistant", "", tool_calls=(CALL,)), tool_result(CALL, "[]")]
    assert unanswered_turn(answered) == []
    assert unanswered_turn([*answered, Message("user", "c")]) == [Message("user", "c")]
    assert unanswered_turn([*answered, Message("user", "c"), *tools]) == [Message("user", "c"), *tools]
    continued = [
        Message("user", "c"),
        Message("assistant", "cut"),
        Message("user", "go on", meta={"continuation": True}),
    ]
    assert unanswered_turn([*answered, *continued]) == continued
    summary = Message("user", "[summary]", meta={"summary": True})
    assert unanswered_turn([*answered, summary, *tools]) == []  # a summary is never taken out


async def leave_unanswered(runtime: Runtime, session_id: str, *, with_tools: bool) -> None:
    """What a killed process leaves: the user's message stored, maybe tool steps, no answer."""
    messages = [Message("user", "the question that was never answered")]
    if with_tools:
        messages += [Message("assistant", "", tool_calls=(CALL,)), tool_result(CALL, "[]")]
    await runtime.store.messages.append(session_id, messages)


@pytest.mark.parametrize("with_tools", [False, True])
async def test_the_next_turn_closes_an_interrupted_one_first(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, with_tools: bool
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "first")
        await leave_unanswered(runtime, session.id, with_tools=with_tools)
        emulator.script(Reply(text="Answer."))
        result = await run_turn(runtime, session, "again")
        everything = await runtime.store.messages.load(session.id, include_inactive=True)
    assert result.text == "Answer."
    request = emulator.requests[-1]
    assert_well_formed(request)
    assert [m["role"] for m in request.json["messages"]] == ["user", "assistant", "user"]
    closed = [m for m in everything if not m.active]
    assert len(closed) == (3 if with_tools else 1)
    assert {m.meta["inactive_reason"] for m in closed} == {"turn_interrupted"}


async def test_compress_and_hygiene_see_a_closed_turn_too(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "first")
        await leave_unanswered(runtime, session.id, with_tools=False)
        async with runtime.locks.hold(session.session_key) as lease:
            await runtime.agent.hygiene(lease, session)
        assert [m.role for m in await runtime.store.messages.load(session.id)] == ["user", "assistant"]


def wait_until_streaming(emulator: ProviderEmulator, process: subprocess.Popen[bytes], text: str) -> None:
    """Until the answer to ``text`` streams: its request was taken (the emulator records it once it has
    used the scripted reply; ``in_flight`` alone counts a request whose body is still being read)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        with emulator.lock:
            asked = any(text in json.dumps(request.json.get("messages")) for request in emulator.requests)
            if asked and emulator.in_flight == 1:
                return
        time.sleep(0.02)
    raise AssertionError(f"the answer to {text!r} never streamed (process exit code {process.poll()})")


@pytest.mark.slow
def test_resuming_after_a_killed_process_closes_the_turn_and_says_so(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald
) -> None:
    """A real process, killed (SIGKILL) while the answer streams: nothing of it can run any more."""
    point_at(home, served)
    assert herald("chat", "-q", "first").returncode == 0
    emulator.script(Reply(text_tokens=400))
    emulator.hold_streams()  # the answer stops half-way: the kill comes mid-stream
    environment = {**os.environ, "HERALD_HOME": str(home.root)}
    process = subprocess.Popen(
        [*HERALD, "chat", "-q", "tell me a long story", "--continue"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_sync(lambda: emulator.holding, PROCESS_TIMEOUT, what="the answer streaming")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    emulator.script(Reply(text="Here you go."))
    result = herald("chat", "-q", "next question", "--continue")
    assert (result.returncode, result.stdout) == (0, "Here you go.\n"), result.stderr
    assert "The last turn of this session was interrupted before it was answered" in result.stderr
    request = emulator.requests[-1]
    assert_well_formed(request)
    assert [m["role"] for m in request.json["messages"]] == ["user", "assistant", "user"]


@pytest.mark.slow
def test_ctrl_c_on_a_one_shot_question_stops_the_answer_and_exits_at_once(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald
) -> None:
    """A real process, Ctrl-C (SIGINT) while the answer streams slowly. Before, `chat -q` left the turn
    running and waited for it (DRAIN_SECONDS, as for any exit) before it stopped it, said nothing, and
    exited 5-7 s after the Ctrl-C; `herald chat` stopped the answer in a moment."""
    point_at(home, served)
    emulator.stream_delay = 0.2
    emulator.script(Reply(text_tokens=400))  # about 80 s to stream in full
    environment = {**os.environ, "HERALD_HOME": str(home.root)}
    process = subprocess.Popen(
        [*HERALD, "chat", "-q", "tell me a long story"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until_streaming(emulator, process, "tell me a long story")
        process.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        out, err = process.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        process.kill()
    assert (process.returncode, out, err) == (130, b"", b"[stopped]\n")
    assert took < DRAIN_SECONDS  # it did not wait for the answer (nor long for anything else)
    emulator.stream_delay = 0.0
    emulator.script(Reply(text="Next."))
    result = herald("chat", "-q", "next question", "--continue")
    # the stopped turn was closed, so nothing says it was interrupted
    assert (result.returncode, result.stdout, result.stderr) == (0, "Next.\n", "")
    assert [m["role"] for m in emulator.requests[-1].json["messages"]] == ["user", "assistant", "user"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_stopped_answer_is_still_counted(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, provider: str
) -> None:
    emulator.hold_streams()  # the answer stops half-way until the turn is cancelled
    async with open_agent_runtime(make_config(emulator_url, provider), home) as runtime:
        session = await new_session(runtime)
        streaming = asyncio.Event()

        async def on_event(event: object) -> None:
            if isinstance(event, TextDelta):
                streaming.set()

        emulator.script(Reply(text_tokens=400))
        task = asyncio.create_task(run_turn(runtime, session, "tell me a long story", on_event))
        await asyncio.wait_for(streaming.wait(), WAIT_TIMEOUT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        record = await runtime.store.sessions.get(session.id)
    assert record is not None
    [request] = emulator.requests
    assert record.output_tokens > 0 and record.estimated_cost > 0
    if provider == "anthropic":  # the usage reported at the start of the stream, as it was reported
        assert record.input_tokens == request.input_tokens
        assert record.cache_write_tokens == request.cache_write
    else:  # nothing is reported before the end: an estimate of the prompt
        assert record.input_tokens > 0.5 * request.prompt_tokens
