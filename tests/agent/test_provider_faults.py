"""Transport faults through the real SDKs: every failure of a model call ends as a ``ProviderError``.

For each emulated fault (a connection cut mid-stream, a stream cut where the client cannot tell, JSON
cut in half, a stalled provider) and both providers: one fault is retried and the answer arrives
whole and once; persistent faults end the turn with one sentence naming the cause, the turn out of
the conversation, and the next request exactly the prefix the cache holds.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.events import Retrying, TextDelta, TurnEvent
from agent.model.messages import Message
from agent.model.provider import ProviderError, ProviderRequest
from agent.providers import anthropic_provider, openai_provider
from agent.providers.retry import INTERNAL_ERROR
from agent.store import SessionRecord
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply
from tests.fakes.waiting import wait_until
from tests.helpers import (
    EventLog,
    assert_well_formed,
    new_session,
    prompt_hashes,
    run_turn,
    write_project_notes,
)

API_KEY = "sk-test-0123456789-SECRET"  # must never reach a log line
# The provider's timeout in stall tests: a stalled answer fails in seconds, never hangs; and an answer
# that is not stalled comes well within it, however loaded the machine.
TIMEOUT = 3.0
STALL = 3600.0  # far beyond TIMEOUT; the emulator stops holding when the client hangs up


@dataclass(frozen=True)
class Fault:
    name: str
    arm: Callable[[ProviderEmulator, int], None]  # queue the fault for the next ``count`` requests
    cause: str  # in the user-facing sentence
    streams_text: bool  # text reaches the user before the failure
    model: dict[str, Any] | None = None  # config overrides (make_config retries 3 times, fast)

    @property
    def attempts(self) -> int:
        return int((self.model or {}).get("max_retries", 3)) + 1


DROPPED = "the connection to the model provider dropped"
FAULTS = [
    Fault("drop", lambda emu, n: emu.drop_midstream(count=n), DROPPED, True),
    Fault("drop_unframed", lambda emu, n: emu.drop_midstream(count=n, close_delimited=True), DROPPED, True),
    Fault(
        "truncate",
        lambda emu, n: emu.truncate_next(count=n),
        "the model provider sent a malformed response",
        True,
    ),
    Fault(
        "stall",
        lambda emu, n: emu.stall_next(STALL, count=n),
        "the model provider did not answer in time",
        False,
        model={"timeout": TIMEOUT, "max_retries": 1},  # each attempt waits out the timeout
    ),
]
APIS = ["anthropic", "openai"]


@pytest.fixture(autouse=True)
def secret_key(
    monkeypatch: pytest.MonkeyPatch, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> Iterator[None]:
    """A recognisable API key for both SDKs; after the test, no log line may contain it."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    caplog.set_level(logging.DEBUG)
    yield
    leaked = [r.name for r in caplog.records if API_KEY in r.getMessage() or API_KEY in (r.exc_text or "")]
    assert not leaked, leaked


def config_for(url: str, api: str, fault: Fault | None = None, **model: Any) -> Any:
    return make_config(url, api, model={**((fault and fault.model) or {}), **model})


def streamed_text(events: list[TurnEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def one_message(session: SessionRecord) -> ProviderRequest:
    """A request straight to the provider: the session's prompt and one user message."""
    return ProviderRequest(
        session_id=session.id,
        system=session.system_prompt,
        tools=session.tools,
        messages=[Message(role="user", content="hi")],
        max_tokens=100,
    )


def messages_of(request: RecordedRequest) -> list[tuple[str, str]]:
    """(role, text) of the conversation a request sent, without system messages or cache markers."""
    out = []
    for message in request.json["messages"]:
        if message["role"] == "system":
            continue
        content = message["content"]
        text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
        out.append((message["role"], text))
    return out


def assert_next_request_resumes_the_cached_prefix(emulator: ProviderEmulator, api: str) -> None:
    """The request after a failed turn: roles alternate, same prompt bytes, history without the turn."""
    last = emulator.requests[-1]
    if api == "anthropic":
        assert_well_formed(last)
    assert messages_of(last) == [("user", "first"), ("assistant", "First answer."), ("user", "third")]
    assert len(prompt_hashes(emulator.requests)) == 1  # failed or not, every request sent the same prompt
    assert last.ok and last.cache_read > 0


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
async def test_one_fault_is_retried_and_the_answer_arrives_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, api: str, fault: Fault
) -> None:
    async with open_agent_runtime(config_for(emulator_url, api, fault), home) as runtime:
        session = await new_session(runtime)
        fault.arm(emulator, 1)
        emulator.script(Reply(text="The whole answer."))
        events = EventLog()
        result = await run_turn(runtime, session, "hello", events)
        stored = await runtime.store.messages.load(session.id, include_inactive=True)

    assert result.error is None and result.text == "The whole answer."
    assert [(m.role, m.content, m.active) for m in stored] == [
        ("user", "hello", True),
        ("assistant", "The whole answer.", True),
    ]
    assert [r.ok for r in emulator.requests] == [False, True]
    # what the user saw: the partial text, a retry that tells the client to discard it, the answer once
    [retry] = [e for e in events.events if isinstance(e, Retrying)]
    assert retry.discard_partial is fault.streams_text
    at = events.events.index(retry)
    assert streamed_text(events.events[:at]) == ("partial " if fault.streams_text else "")
    assert streamed_text(events.events[at + 1 :]) == "The whole answer."


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
async def test_persistent_faults_fail_the_turn_cleanly(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, api: str, fault: Fault
) -> None:
    write_project_notes()  # a cacheable prompt, so the resumed request can be checked against the cache
    async with open_agent_runtime(config_for(emulator_url, api, fault), home) as runtime:
        session = await new_session(runtime)
        emulator.script(Reply(text="First answer."))
        assert (await run_turn(runtime, session, "first")).error is None

        fault.arm(emulator, fault.attempts)
        failed = await run_turn(runtime, session, "second")
        attempts = f"{fault.attempts} attempts"
        assert failed.error == f"No answer: {fault.cause} ({attempts}). Please try again in a minute."
        assert failed.text == ""
        everything = await runtime.store.messages.load(session.id, include_inactive=True)
        assert [(m.content, m.active) for m in everything] == [
            ("first", True),
            ("First answer.", True),
            ("second", False),
        ]
        assert [r.ok for r in emulator.requests] == [True] + [False] * fault.attempts

        emulator.script(Reply(text="Back."))
        assert (await run_turn(runtime, session, "third")).text == "Back."
    assert_next_request_resumes_the_cached_prefix(emulator, api)


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_that_stalls_midway_times_out(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, api: str
) -> None:
    """Headers and the first events arrive, then nothing: the read timeout ends the attempt."""
    emulator.hold_streams(2)  # both attempts stop half-way, until the client gives up
    config = config_for(emulator_url, api, timeout=1.0, max_retries=1)
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        result = await run_turn(runtime, session, "hello")
    assert result.error == (
        "No answer: the model provider did not answer in time (2 attempts). Please try again in a minute."
    )


@pytest.mark.parametrize("api", APIS)
async def test_a_bug_is_an_internal_error_logged_once_and_not_retried(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    api: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(usage: Any) -> Any:
        raise RuntimeError(f"a bug that mentions the key {API_KEY}")

    module: Any = anthropic_provider if api == "anthropic" else openai_provider
    monkeypatch.setattr(module, "normalize_usage", broken)
    async with open_agent_runtime(config_for(emulator_url, api), home) as runtime:
        session = await new_session(runtime)
        result = await run_turn(runtime, session, "hello")
        assert result.error == INTERNAL_ERROR
        assert len(emulator.requests) == 1  # not retried
        tracebacks = [r for r in caplog.records if "Traceback" in r.getMessage()]
        assert len(tracebacks) == 1 and "RuntimeError: a bug that mentions the key [REDACTED]" in (
            tracebacks[0].getMessage()
        )

        request = one_message(session)
        with pytest.raises(ProviderError) as info:
            await runtime.agent.provider_for(session).complete(request)
    error = info.value
    assert error.kind == "internal" and not error.retryable
    assert isinstance(error.__cause__, RuntimeError) and API_KEY not in str(error)


@pytest.mark.parametrize("api", APIS)
async def test_only_provider_errors_leave_complete(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, api: str
) -> None:
    """One attempt per fault, straight at the provider: each is a ProviderError of the expected kind."""
    expected = {
        "drop": "connection",
        "drop_unframed": "connection",
        "truncate": "malformed",
        "stall": "timeout",
    }
    async with open_agent_runtime(config_for(emulator_url, api, timeout=TIMEOUT), home) as runtime:
        session = await new_session(runtime)
        request = one_message(session)
        kinds = {}
        for fault in FAULTS:
            fault.arm(emulator, 1)
            with pytest.raises(ProviderError) as info:
                await runtime.agent.provider_for(session).complete(request)
            assert info.value.retryable
            kinds[fault.name] = info.value.kind
        assert (await runtime.agent.provider_for(session).complete(request)).text.startswith("Emulated reply")
    assert kinds == expected


@pytest.mark.parametrize("api", APIS)
async def test_an_unreachable_provider_is_named_as_such(home: HeraldHome, api: str) -> None:
    config = make_config("http://127.0.0.1:1", api, model={"max_retries": 1})  # nothing listens there
    async with open_agent_runtime(config, home) as runtime:
        result = await run_turn(runtime, await new_session(runtime), "hello")
    assert result.error == (
        "No answer: the model provider could not be reached (2 attempts). Please try again in a minute."
    )


@pytest.mark.parametrize("api", APIS)
async def test_a_cancelled_answer_hangs_up_on_the_provider_at_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, api: str
) -> None:
    """A turn stopped mid-stream (/stop, Ctrl-C, a newer message) closes its HTTP response then, not when
    the garbage collector reaches the stream: a stopped answer frees its connection at once, and an exiting
    `herald chat` has no half-read stream left to close (which printed a traceback after "[stopped]")."""
    emulator.hold_streams(1)  # the answer stops half-way until the client hangs up
    streamed = asyncio.Event()

    async def on_text(_text: str) -> None:
        streamed.set()

    async with open_agent_runtime(config_for(emulator_url, api), home) as runtime:
        session = await new_session(runtime)
        provider = runtime.agent.provider_for(session)
        gc.disable()  # only an explicit close can end the response now
        try:
            answering = asyncio.create_task(provider.complete(one_message(session), on_text))
            await streamed.wait()
            answering.cancel()
            with pytest.raises(asyncio.CancelledError):
                await answering
            await wait_until(lambda: emulator.in_flight == 0, what="the provider seeing the hang-up")
        finally:
            gc.enable()
