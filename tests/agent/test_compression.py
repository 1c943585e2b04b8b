"""Compression end to end: the real anthropic SDK, the emulator, and the agent's own store."""

from __future__ import annotations

import pytest

from agent.compression.summary import SUMMARY_PREFIX
from agent.tools.registry import ToolContext
from agent.tools.session_search import SESSION_SEARCH_TOOL
from agent.usage import Usage
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.helpers import (
    ChatResponder,
    assert_well_formed,
    compress,
    hygiene,
    is_summary_request,
    new_session,
    prompt_hashes,
    run_turn,
)

WINDOW = 20_000  # a small window so a few turns cross the 50% threshold (10,000 tokens)


def config_for(url: str, **compression: object):
    settings = {"protect_last_n": 4, **compression}
    return make_config(url, model={"context_length": WINDOW, "max_tokens": 2000}, compression=settings)


def ask(turn: int) -> str:
    tool = " USE-TOOL" if turn % 3 == 2 else ""
    return f"Turn {turn}: remember FACT-{turn}.{tool} " + "Tell me more about the rollout plan. " * 8


async def chat(runtime: Runtime, session_id: str, turns: range) -> None:
    for turn in turns:
        session = await runtime.store.sessions.get(session_id)
        assert session is not None
        result = await run_turn(runtime, session, ask(turn))
        assert result.error is None


async def test_threshold_trigger_summary_and_cache_discipline(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    responder = ChatResponder(reply_tokens=900)
    emulator.responder = responder
    async with open_agent_runtime(config_for(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(24))
        active = await runtime.store.messages.load(session.id)
        everything = await runtime.store.messages.load(session.id, include_inactive=True)
        record = await runtime.store.sessions.get(session.id)

    requests = [r for r in emulator.requests if r.ok]
    summaries = [i for i, r in enumerate(requests) if is_summary_request(r)]
    assert len(summaries) >= 2, "the chat should cross the threshold at least twice"
    threshold = WINDOW // 2
    for index, request in enumerate(requests[:-1]):
        if is_summary_request(request):
            continue
        follows = is_summary_request(requests[index + 1])
        assert follows == (request.prompt_tokens >= threshold), (index, request.prompt_tokens)

    # the system prompt and tools never change, summaries included; the session keeps its id
    assert len(prompt_hashes(requests)) == 1
    assert record is not None and record.id == session.id
    # the summary request reads the whole history from cache: only the task itself is new
    for index in summaries:
        assert requests[index].cache_read >= requests[index - 1].prompt_tokens - 50
    # every request after a compression is well formed
    for request in requests:
        assert_well_formed(request)
    # the second summary updates the first: facts only the first summary saw are still there
    first_summary_facts = set(responder.summaries[0].split()[-3:])
    assert first_summary_facts <= set(responder.summaries[-1].split())
    assert "updated summary" in str(requests[summaries[1]].json["messages"][-1])
    # nothing is lost: compressed messages are inactive, not deleted, and still searchable
    assert len(everything) > len(active)
    assert sum(1 for m in active if m.content.startswith(SUMMARY_PREFIX)) == 1
    assert active[0].content.startswith("Turn 0")  # the first exchange is always kept


async def test_compressed_messages_are_still_found_by_session_search(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=900)
    async with open_agent_runtime(config_for(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(14))
        active_text = " ".join(m.content for m in await runtime.store.messages.load(session.id))
        memory = runtime.memory.store(session.memory_scope)
        context = ToolContext(
            session.id, session.session_key, runtime.store, memory, runtime.skills, runtime.agent.calls
        )
        found = await SESSION_SEARCH_TOOL.handler({"query": "FACT-3"}, context)
    assert isinstance(found, str)
    assert "Turn 3: remember" not in active_text  # compressed away...
    [hit] = [line for line in found.splitlines() if "remember [FACT-3]" in line]  # ...but findable
    assert "(this session) · user (compressed away): " in hit


async def test_hygiene_fires_at_85_percent_and_not_below(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=200)
    config = config_for(emulator_url, enabled=True, threshold=0.95)  # keep the in-loop trigger out of it
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(8))
        sent = len(emulator.requests)

        # `session` is the record from before the chat: hygiene judges by what is stored now
        await runtime.store.usage.set_last_prompt_tokens(session.id, int(WINDOW * 0.85) - 1)
        assert await hygiene(runtime, session) is None
        assert len(emulator.requests) == sent

        await runtime.store.usage.set_last_prompt_tokens(session.id, int(WINDOW * 0.85))
        outcome = await hygiene(runtime, session)
        assert outcome is not None and outcome.method in ("summary", "pruned")
        assert outcome.messages_after < outcome.messages_before
        after = await runtime.store.sessions.get(session.id)
        assert after is not None and after.last_prompt_tokens is not None
        assert after.last_prompt_tokens < WINDOW * 0.85  # no second hygiene run before the next turn
        assert await hygiene(runtime, after) is None


async def test_hygiene_fires_past_400_messages(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    from agent.model.messages import Message
    from agent.tool_runs import with_payload

    emulator.responder = ChatResponder(reply_tokens=10)
    async with open_agent_runtime(config_for(emulator_url), home) as runtime:
        session = await new_session(runtime)
        pairs = [Message(role=r, content=f"{r} {i}") for i in range(201) for r in ("user", "assistant")]
        provider = runtime.agent.provider_for(session)
        await runtime.store.messages.append(session.id, [with_payload(provider, m) for m in pairs])
        await runtime.store.usage.set_last_prompt_tokens(session.id, 100)
        outcome = await hygiene(runtime, session)
    assert outcome is not None and outcome.messages_before == 402 and outcome.messages_after <= 104


async def test_failed_summary_keeps_the_transcript_and_cools_down(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=300)
    async with open_agent_runtime(config_for(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(10))
        before = await runtime.store.messages.load(session.id)
        emulator.fail_next(529, count=2)  # the summary and its one retry
        outcome = await compress(runtime, session)
        assert outcome is not None and outcome.method == "failed"
        assert "the conversation is unchanged" in outcome.line()
        assert [m.id for m in await runtime.store.messages.load(session.id)] == [m.id for m in before]
        stored = await runtime.store.sessions.get(session.id)
        assert stored is not None and stored.compress_failures == 1 and stored.compress_retry_at is not None

    # The cooldown is stored with the session: a restarted process (a new runtime) still honours it.
    async with open_agent_runtime(config_for(emulator_url), home) as runtime:
        engine = runtime.agent.context_engine
        assert engine is not None
        sent = len(emulator.requests)
        over_threshold = Usage(input_tokens=WINDOW // 2)
        assert await engine.after_response(session, before, over_threshold) is None  # cooling down
        assert len(emulator.requests) == sent
        cannot_fit = Usage(input_tokens=WINDOW)
        outcome = await engine.after_response(session, before, cannot_fit)  # ...unless it cannot fit
        assert outcome is not None and outcome.method == "summary"
        reset = await runtime.store.sessions.get(session.id)
        assert reset is not None and reset.compress_failures == 0 and reset.compress_retry_at is None


async def test_when_nothing_fits_and_the_summary_fails_old_turns_are_set_aside_with_a_notice(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=300)
    async with open_agent_runtime(config_for(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(10))
        await runtime.store.usage.set_last_prompt_tokens(session.id, WINDOW - 100)  # no room for an answer
        emulator.fail_next(529, count=2)
        outcome = await compress(runtime, session)
        assert outcome is not None and outcome.method == "dropped"
        assert outcome.notice is not None and "oldest messages" in outcome.notice
        hits = await runtime.store.messages.search("FACT-2")
        await chat(runtime, session.id, range(10, 11))  # and the chat goes on, well formed
    assert any(not hit.active for hit in hits)
    assert_well_formed(emulator.requests[-1])


@pytest.mark.parametrize("auxiliary_fails", [False, True])
async def test_auxiliary_summary_model_and_its_fallback_to_the_main_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, auxiliary_fails: bool
) -> None:
    emulator.responder = ChatResponder(reply_tokens=300)
    config = config_for(emulator_url)
    config.auxiliary.compression.model = "claude-haiku-4-5"
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(10))
        if auxiliary_fails:
            emulator.fail_next(500, count=1)
        outcome = await compress(runtime, session)
    assert outcome is not None and outcome.method == "summary"
    summary_requests = [r for r in emulator.requests if is_summary_request(r)]
    models = [r.model for r in summary_requests]
    assert models == (["claude-haiku-4-5", "claude-sonnet-4-6"] if auxiliary_fails else ["claude-haiku-4-5"])
    # the auxiliary model cannot read the session's cache, so it gets a compact transcript
    assert len(summary_requests[0].json["messages"]) == 1 and "tools" not in summary_requests[0].json


async def test_a_server_that_reports_no_usage_still_gets_compressed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.providers.openai_provider import OpenAIProvider

    original = OpenAIProvider.build_body

    def without_usage(self: OpenAIProvider, request: object) -> dict:
        body = original(self, request)  # type: ignore[arg-type]
        del body["stream_options"]  # like a compatible server that never sends a usage chunk
        return body

    monkeypatch.setattr(OpenAIProvider, "build_body", without_usage)
    emulator.responder = ChatResponder(reply_tokens=900)
    config = make_config(
        emulator_url,
        "openai",
        model={"context_length": WINDOW, "max_tokens": 2000},
        compression={"protect_last_n": 4},
    )
    async with open_agent_runtime(config, home) as runtime:
        session = await new_session(runtime)
        await chat(runtime, session.id, range(16))
    assert all(
        r.prompt_tokens > 0 for r in emulator.requests
    )  # the emulator counted; Herald was told nothing
    assert any(is_summary_request(r) for r in emulator.requests)
