"""Fallback models end to end on Telegram: real python-telegram-bot against the fake Bot API, the real
anthropic SDK against the emulator. The emulator answers 529 for the primary model for a minute of its
clock (the agent's too, so probe intervals pass without waiting): every message meanwhile is answered by
the fallback with one line saying so, then by the primary again once a probe found it back. A request
refused as invalid and a spend limit are not reasons to ask another model."""

from __future__ import annotations

from typing import Any

import pytest

from agent.api import Provider
from gateway.cron.jobs import RunStatus
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import wait_until
from tests.gateway_support import ADMIN, FRIEND, Harness, telegram_gateway
from tests.spend_support import crossing, dollars

pytestmark = pytest.mark.timeout(90)

SONNET = "claude-sonnet-4-6"
HAIKU = "claude-haiku-4-5"
OPUS = "claude-opus-4-1"
EPOCH = 1_800_000_000.0
LINE = "ℹ️ The main model is overloaded; this answer comes from claude-haiku-4-5."
FALLBACKS = {"fallbacks": [{"provider": "anthropic", "name": HAIKU}], "fallback_probe_interval": 30.0}


def runtime_of(harness: Harness, emulator: ProviderEmulator) -> Runtime:
    """The gateway's agent runtime, its clock made the emulator's."""
    runtime = harness.gateway.services.runtime
    runtime.agent.clock = lambda: EPOCH + emulator.clock.now()
    return runtime


def primary_failing(runtime: Runtime) -> bool:
    failover = runtime.agent.calls.failover
    assert failover is not None
    primary: Provider = runtime.pool.for_session("anthropic", SONNET)
    return failover.outage(primary) is not None


async def ask(harness: Harness, text: str, *, answered: bool = True) -> str:
    """Send ``text`` as the friend; the reply they see (``answered``: the model answers it)."""
    if answered:
        harness.emulator.script(Reply(text=f"Answer to {text}."))
    harness.fake.private_message(FRIEND, text)
    await harness.settled()
    return harness.texts(FRIEND)[-1]


async def test_an_overloaded_model_is_stood_in_for_then_answers_again(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url, model=FALLBACKS) as harness:
        runtime = runtime_of(harness, emulator)
        assert await ask(harness, "one") == "Answer to one."

        emulator.fail_for(60, 529, model=SONNET)  # a minute of overload, the primary only
        for text in ("two", "three", "four"):
            assert await ask(harness, text) == f"Answer to {text}.\n\n{LINE}"
            emulator.clock.advance(10)  # within the probe interval: no probe yet
        assert primary_failing(runtime)
        asked = [r.model for r in emulator.requests]
        assert asked == [SONNET, *[SONNET] * 4, HAIKU, HAIKU, HAIKU]  # once known to fail, not asked again

        emulator.clock.advance(40)  # the minute is over, and the probe interval
        assert await ask(harness, "five") == f"Answer to five.\n\n{LINE}"  # it starts a probe beside it
        await wait_until(lambda: not primary_failing(runtime), what="the probe to find the primary back")
        assert await ask(harness, "six") == "Answer to six."
        assert await ask(harness, "seven") == "Answer to seven."

    after = [(r.model, r.json["max_tokens"]) for r in emulator.requests[len(asked) :]]
    assert sorted(after[:2]) == sorted([(HAIKU, 4096), (SONNET, 1)])  # the answer and the probe
    assert after[2:] == [(SONNET, 4096), (SONNET, 4096)]
    assert harness.texts(FRIEND)[0] == "Answer to one."


async def test_a_request_refused_as_invalid_is_not_failed_over(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url, model=FALLBACKS) as harness:
        runtime = runtime_of(harness, emulator)
        emulator.fail_next(400, model=SONNET)
        reply = await ask(harness, "hello", answered=False)
        assert not primary_failing(runtime)
        assert await ask(harness, "again") == "Answer to again."
    assert reply.startswith("⚠️ The model provider rejected the request")
    assert [r.model for r in emulator.requests] == [SONNET, SONNET]


async def test_a_spend_limit_is_not_failed_over(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The primary is overloaded; its first fallback costs more than the chat's day has left: the chat is
    told what that request could cost against what is left, and neither that fallback nor the next one is
    asked."""
    model: dict[str, Any] = {
        "max_tokens": 100,
        "fallbacks": [{"provider": "anthropic", "name": OPUS}, {"provider": "anthropic", "name": HAIKU}],
    }
    budgets = {"chat": {"daily_usd": 0.01}}  # a request to the primary fits, one to the expensive one not
    async with telegram_gateway(
        home, emulator, emulator_url, model=model, budgets=budgets, scheduler={"timezone": "UTC"}
    ) as harness:
        runtime_of(harness, emulator)
        emulator.fail_for(60, 529, model=SONNET)
        reply = await ask(harness, "hello", answered=False)
    told = crossing(reply)  # what the fallback could cost, more than the day has left
    assert (told["who"], told["spent"], told["limit"]) == ("This chat has", "$0.00", "$0.01")
    assert told["left"] == "$0.01"
    assert dollars(told["needed"]) > 0.01 and told["when"] == "at 00:00 UTC"
    assert [r.model for r in emulator.requests] == [SONNET] * 4


async def test_a_scheduled_run_is_answered_by_the_fallback_with_the_line(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url, model=FALLBACKS) as harness:
        runtime_of(harness, emulator)
        harness.fake.private_message(ADMIN, "/cron add every 2h | remind me to water the plants")
        await harness.settled()
        [job] = await harness.gateway.services.runtime.cron.jobs.all()
        emulator.fail_for(60, 529, model=SONNET)
        emulator.script(Reply(text="Water the plants."))
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        assert harness.texts(ADMIN)[-1] == f"Water the plants.\n\n{LINE}"
    assert [r.model for r in emulator.requests] == [SONNET] * 4 + [HAIKU]
