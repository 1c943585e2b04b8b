"""Cache-miss reports end to end: each cause produced on purpose against the emulator through the real
SDKs, reported with the right cause, tokens and price; a normal chat reports none.

The agent's clock follows the emulator's (``chat``), so a pause is a move of the emulated clock.
The emulator's oracle (the longest prefix any earlier request sent) checks the reported shortfall.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa

from agent.db.schema import messages, sessions
from agent.prompt import SystemPrompt
from agent.side import CHILD_PREAMBLE, REVIEW_TASK, review
from agent.store import CacheMiss, SessionRecord
from gateway.config import HeraldConfig
from gateway.cron.jobs import RunStatus
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.gateway_support import FRIEND, telegram_gateway
from tests.helpers import (
    SUMMARY_TASK,
    ChatResponder,
    compress,
    herald_cli,
    new_session,
    run_turn,
    write_project_notes,
)

pytestmark = pytest.mark.timeout(120)


def ask(turn: int) -> str:
    return f"Turn {turn}: " + "please go through the next part of the plan and what could go wrong, " * 5


def config(url: str, provider: str = "anthropic", **sections: Any) -> HeraldConfig:
    return make_config(url, provider, **sections)


@asynccontextmanager
async def chat(emulator: ProviderEmulator, config: HeraldConfig, home: HeraldHome) -> AsyncIterator[Runtime]:
    """A runtime whose clock is the emulator's (from now), with project notes over the cache minimum."""
    write_project_notes()
    async with open_agent_runtime(config, home) as runtime:
        start = time.time()
        runtime.agent.clock = lambda: start + emulator.clock.now()
        yield runtime


async def turns(runtime: Runtime, emulator: ProviderEmulator, session: SessionRecord, numbers: range) -> None:
    """Turns ``numbers``, a tool round every 4th, 20 emulated seconds apart (a person reading, typing)."""
    for number in numbers:
        if number % 4 == 3:
            todos = [{"id": str(number), "content": f"item {number}", "status": "pending"}]
            emulator.script(Reply(tool_calls=[ToolUse("todo", {"todos": todos, "merge": True})]))
        emulator.script(Reply(text_tokens=200))
        current = await runtime.store.sessions.get(session.id) or session
        result = await run_turn(runtime, current, ask(number))
        assert result.error is None, result.error
        emulator.clock.advance(20)


def last_ok(emulator: ProviderEmulator) -> RecordedRequest:
    return [r for r in emulator.requests if r.ok][-1]


def assert_shortfall_matches_the_oracle(miss: CacheMiss, request: RecordedRequest) -> None:
    """The miss is what the emulator's oracle could have read and the provider did not."""
    assert miss.read_tokens == request.cache_read
    assert miss.missed_tokens == pytest.approx(request.oracle_tokens - request.cache_read, rel=0.02)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_thirty_turn_chat_misses_nothing_and_an_eviction_after_it_is_reported(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, provider: str
) -> None:
    async with chat(emulator, config(emulator_url, provider), home) as runtime:
        session = await new_session(runtime)
        await turns(runtime, emulator, session, range(30))
        assert await runtime.store.cache_misses.totals() == []

        emulator.reset_cache()  # the provider forgets everything
        await turns(runtime, emulator, session, range(30, 31))
        [miss] = await runtime.store.cache_misses.of_session(session.id)
        [totals] = await runtime.store.cache_misses.totals(session_key=session.session_key)
        rows = await runtime.store.usage.by_purpose()
    evicted = last_ok(emulator)
    assert (miss.cause, miss.purpose, miss.session_key) == ("evicted", "turn", session.session_key)
    assert miss.read_tokens == 0 and miss.expected_tokens > 10_000
    assert_shortfall_matches_the_oracle(miss, evicted)
    assert miss.request_id is not None and miss.missed_usd > 0
    assert (totals.cause, totals.count, totals.missed_tokens) == ("evicted", 1, miss.missed_tokens)
    assert sum(row.requests for row in rows) == 31 + 7  # the request ids point into every request


async def test_a_pause_past_the_ttl_is_reported_once_with_how_long_the_chat_was_idle(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with chat(emulator, config(emulator_url), home) as runtime:  # cache_ttl auto: the tail has 5m
        session = await new_session(runtime)
        await turns(runtime, emulator, session, range(4))
        emulator.clock.advance(10 * 60)
        await turns(runtime, emulator, session, range(4, 5))
        paused = last_ok(emulator)
        await turns(runtime, emulator, session, range(5, 8))  # the tail now gets 1h: nothing more missed
        [miss] = await runtime.store.cache_misses.of_session(session.id)
        report = await herald_cli("insights")
    assert miss.cause == "ttl_expired" and miss.purpose == "turn"
    assert miss.detail == "idle 10m 20s since the prefix was last used; its TTL is 5m"
    assert miss.read_tokens > 0  # the system prompt, cached for an hour, was still read
    assert_shortfall_matches_the_oracle(miss, paused)
    assert "TTL expired" in report and f"{miss.missed_tokens:,}" in report


async def test_prefix_records_outlive_a_restart(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with chat(emulator, config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await turns(runtime, emulator, session, range(3))
    async with chat(emulator, config(emulator_url), home) as runtime:  # a new process: nothing in memory
        start = time.time() - emulator.clock.now()  # the same time line as before
        runtime.agent.clock = lambda: start + emulator.clock.now()
        await turns(runtime, emulator, session, range(3, 5))
        assert await runtime.store.cache_misses.of_session(session.id) == []
        emulator.reset_cache()
        await turns(runtime, emulator, session, range(5, 6))
        [miss] = await runtime.store.cache_misses.of_session(session.id)
    assert miss.cause == "evicted"
    assert_shortfall_matches_the_oracle(miss, last_ok(emulator))


async def test_compression_is_reported_on_the_request_after_it_and_not_on_the_summary(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=300)
    settings = config(emulator_url, compression={"protect_last_n": 4})
    async with chat(emulator, settings, home) as runtime:
        session = await new_session(runtime)
        for number in range(8):
            await run_turn(runtime, session, ask(number))
            emulator.clock.advance(20)
        outcome = await compress(runtime, session)
        assert outcome is not None and outcome.method == "summary"
        summary = last_ok(emulator)
        await run_turn(runtime, session, ask(8))
        [miss] = await runtime.store.cache_misses.of_session(session.id)
    after = last_ok(emulator)
    assert SUMMARY_TASK in json.dumps(summary.json["messages"][-1]) and summary.cache_read > 0
    assert (miss.cause, miss.purpose) == ("compression", "turn")
    assert miss.read_tokens == after.cache_read > 0  # the system prompt and the first exchange
    # The rest of the (now shorter) history had been cached before, and had to be written again.
    assert miss.expected_tokens == pytest.approx(after.prompt_tokens, rel=0.02)


async def tamper(runtime: Runtime, statement: sa.Update) -> None:
    """Change stored bytes behind Herald's back, as a bug (or a hand-edited database) would."""
    await runtime.storage.write(lambda conn: conn.execute(statement))


async def test_history_edited_behind_the_sessions_back_is_reported(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with chat(emulator, config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await turns(runtime, emulator, session, range(6))
        answer = (await runtime.store.messages.load(session.id))[1]
        assert answer.role == "assistant" and answer.payload is not None
        edited = {**answer.payload, "content": [{"type": "text", "text": answer.content + " (edited)"}]}
        await tamper(
            runtime, sa.update(messages).where(messages.c.id == answer.id).values(payload=json.dumps(edited))
        )
        await turns(runtime, emulator, session, range(6, 7))
        [miss] = await runtime.store.cache_misses.of_session(session.id)
    previous, edited_request = [r for r in emulator.requests if r.ok][-2:]
    assert (miss.cause, miss.purpose) == ("history_edited", "turn")
    assert miss.read_tokens == edited_request.cache_read  # the prompt and the first question
    assert miss.expected_tokens == pytest.approx(previous.prompt_tokens, rel=0.02)  # all it had cached


async def test_a_changed_system_prompt_is_reported_and_logged_as_an_error(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    async with chat(emulator, config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await turns(runtime, emulator, session, range(6))
        prompt = session.system_prompt
        changed = SystemPrompt(prompt.stable, prompt.context, prompt.volatile + "\nToday is another day.")
        await tamper(
            runtime,
            sa.update(sessions).where(sessions.c.id == session.id).values(system_prompt=changed.to_json()),
        )
        with caplog.at_level(logging.ERROR, logger="agent.cache_misses"):
            await turns(runtime, emulator, session, range(6, 7))
        [miss] = await runtime.store.cache_misses.of_session(session.id)
    assert miss.cause == "prompt_changed"
    assert miss.read_tokens == last_ok(emulator).cache_read  # the shared layers were still read
    # This module's errors only: an error another test left behind (a client closed after its loop was,
    # logged by asyncio when collected) may land in this test's records on a loaded machine.
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR and r.name.startswith("agent.")]
    assert session.id in error.getMessage() and "tool list or system prompt changed" in error.getMessage()


def side_model(emulator: ProviderEmulator) -> Any:
    """A model that delegates one task when asked; the provider forgets its cache right after it
    answered a request whose last message says FORGET, or a review (so the next request, whatever its
    purpose, finds nothing)."""

    def respond(body: dict[str, Any], api: str) -> Reply:
        everything, last = json.dumps(body["messages"]), json.dumps(body["messages"][-1])
        if "FORGET" in last or REVIEW_TASK[:30] in last:
            emulator.reset_cache()
        if SUMMARY_TASK in last:
            return Reply(text="## Goal\nThe plan.")
        if CHILD_PREAMBLE[:30] in everything or "tool_result" in last:
            return Reply(text_tokens=120)
        if "DELEGATE" in last:
            return Reply(tool_calls=[ToolUse("delegate", {"tasks": ["List the risks. FORGET"]})])
        return Reply(text_tokens=250)

    return respond


async def test_misses_are_found_for_every_purpose(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Sub-agents, the tool round after them, a background review and a summary each miss once when
    the provider forgot its cache just before them."""
    emulator.responder = side_model(emulator)
    async with chat(emulator, config(emulator_url, compression={"protect_last_n": 4}), home) as runtime:
        session = await new_session(runtime)
        for number in range(4):
            await run_turn(runtime, session, ask(number))
        await run_turn(runtime, session, "Please DELEGATE the risk list. FORGET")  # the child misses
        await run_turn(runtime, session, "And now? FORGET")
        current = await runtime.store.sessions.get(session.id) or session
        assert (await review(runtime.agent, current, max_iterations=2)).error is None  # the review misses
        await compress(runtime, current)  # the summary misses
        found = await runtime.store.cache_misses.of_session(session.id)
    purposes = [(m.purpose, m.cause) for m in found]
    assert purposes == [
        ("subagent", "evicted"),  # its system prompt was forgotten after the parent's request
        ("turn", "evicted"),  # the tool round after the child
        ("review", "evicted"),
        ("summary", "evicted"),
    ]


async def test_a_model_switch_is_reported_in_insights_and_in_metrics(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """/model then /new: the new session's prompt repeats the shared layers the chat had cached, on
    another model, which has none of it."""
    write_project_notes()
    model = {"name": "claude-sonnet-4-5"}  # 1,024-token minimum, like the model switched to
    async with telegram_gateway(home, emulator, emulator_url, model=model) as harness:
        runtime = harness.gateway.services.runtime
        start = time.time()
        runtime.agent.clock = lambda: start + emulator.clock.now()
        for text in ("hello", "and one more", "/model claude-opus-4-1", "/new", "hello again"):
            harness.fake.private_message(FRIEND, text)
            await harness.settled()
            emulator.clock.advance(20)
        harness.fake.private_message(FRIEND, "/insights")
        await harness.settled()
        report = harness.texts(FRIEND)[-1]
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as client,
            client.get(f"{harness.gateway.http.url}/metrics") as response,
        ):
            metrics = await response.text()
        [miss] = await runtime.store.cache_misses.totals()
    switched = last_ok(emulator)
    assert switched.model == "claude-opus-4-1" and switched.cache_read == 0
    assert (miss.cause, miss.count) == ("model_changed", 1) and miss.missed_tokens > 2_000
    assert "model changed" in report and f"{miss.missed_tokens:,}" in report
    assert 'herald_cache_miss_total{cause="model_changed"} 1.0' in metrics
    assert f'herald_cache_miss_usd_total{{cause="model_changed"}} {miss.missed_usd}' in metrics


async def test_a_scheduled_jobs_runs_are_watched_too(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    create = {"action": "create", "schedule": "every 1h", "prompt": "Summarise my feeds.", "name": "Feeds"}
    emulator.script(Reply(tool_calls=[ToolUse("cron", create)]), Reply(text="Done."))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        runtime = harness.gateway.services.runtime
        harness.fake.private_message(FRIEND, "post my feeds every hour")
        await harness.settled()
        [job] = await runtime.cron.jobs.all()
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        emulator.reset_cache()
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        [miss] = await runtime.store.cache_misses.totals()
        [cron] = [m for m in await runtime.store.cache_misses.of_chat(job.session_key) if m.purpose == "cron"]
    assert (miss.cause, miss.count) == ("evicted", 1)
    assert cron.cause == "evicted" and cron.read_tokens == 0
