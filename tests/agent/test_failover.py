"""Fallback models through the real SDKs against the emulator: a session whose own model is overloaded is
answered by the fallback (its usage priced and named as the fallback's, the session's own prompt bytes
sent to it), goes back to its own model once a probe is answered, and nothing but the provider's own
failures fails over. The emulator's clock is the agent's: probe intervals pass in virtual time."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa

from agent.db.schema import requests
from agent.events import FailingOver, TextDelta
from agent.failover import (
    WAITS_FOR_PRIMARY,
    Failover,
    failover_line,
    fails_over,
    failure_reason,
)
from agent.model.provider import FailedOver, Provider, ProviderError
from agent.models import lookup_model
from agent.providers.pool import ProviderKey
from agent.side import REVIEW, review
from agent.store import SessionRecord
from agent.usage import cost
from gateway.config import ConfigError
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply
from tests.fakes.waiting import wait_until
from tests.helpers import EventLog, new_session, run_turn, write_project_notes

pytestmark = pytest.mark.timeout(60)

SONNET = "claude-sonnet-4-6"
HAIKU = "claude-haiku-4-5"
MINI = "gpt-5-mini"
EPOCH = 1_800_000_000.0
INTERVAL = 30.0  # model.fallback_probe_interval
OVERLOADED = "The main model is overloaded; this answer comes from {}."


def fallback(kind: str, url: str) -> dict[str, Any]:
    """A fallback on the primary's own provider (its endpoint and key), or on another one with a key of
    its own."""
    if kind == "anthropic":
        return {"provider": "anthropic", "name": HAIKU}
    return {"provider": "openai", "name": MINI, "base_url": url + "/v1", "api_key_env": "FALLBACK_KEY"}


def config(url: str, *fallbacks: dict[str, Any], **sections: Any) -> Any:
    model = {"fallbacks": list(fallbacks), "fallback_probe_interval": INTERVAL, **sections.pop("model", {})}
    return make_config(url, model=model, **sections)


def synced(runtime: Runtime, emulator: ProviderEmulator) -> Runtime:
    """The agent's clock is the emulator's: TTLs and probe intervals pass when the test says."""
    runtime.agent.clock = lambda: EPOCH + emulator.clock.now()
    return runtime


def primary_of(runtime: Runtime) -> Provider:
    return runtime.pool.for_session("anthropic", SONNET)


def failover_of(runtime: Runtime) -> Failover:
    failover = runtime.agent.calls.failover
    assert failover is not None
    return failover


async def recorded(runtime: Runtime) -> list[tuple[str, str, float, int, int]]:
    """Each recorded request: purpose, model, cost, uncached input tokens, cache reads."""
    columns = (
        requests.c.purpose,
        requests.c.model,
        requests.c.estimated_cost,
        requests.c.input_tokens,
        requests.c.cache_read_tokens,
    )
    query = sa.select(*columns).order_by(requests.c.id)
    rows = await runtime.storage.read(lambda conn: conn.execute(query).all())
    return [
        (r.purpose, r.model, float(r.estimated_cost), int(r.input_tokens), int(r.cache_read_tokens))
        for r in rows
    ]


def to(model: str, sent: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in sent if r.model == model]


async def turn(runtime: Runtime, session: SessionRecord, text: str, emulator: ProviderEmulator) -> Any:
    emulator.script(Reply(text=f"Answer to {text}."))
    result = await run_turn(runtime, session, text)
    assert result.error is None, result.error
    assert result.text == f"Answer to {text}."
    emulator.clock.advance(20)  # a person reading and typing
    return result


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_an_overloaded_model_is_stood_in_for_until_a_probe_finds_it_back(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FALLBACK_KEY", "fallback-key")
    write_project_notes()  # a prompt over the cacheable minimum: the failover's cache cost shows
    stand_in = HAIKU if kind == "anthropic" else MINI
    line = OVERLOADED.format(stand_in)
    caplog.set_level(logging.INFO)
    async with open_agent_runtime(config(emulator_url, fallback(kind, emulator_url)), home) as runtime:
        synced(runtime, emulator)
        session = await new_session(runtime)
        first = await turn(runtime, session, "one", emulator)
        assert first.notices == ()

        emulator.fail_for(60, 529, model=SONNET)  # a minute of overload, for the primary only
        during = await turn(runtime, session, "two", emulator)
        assert during.notices == (line,)
        # its retries (1 + 3) failed, then the fallback was asked, once
        assert [(r.model, r.status) for r in emulator.requests[1:]] == [(SONNET, 529)] * 4 + [(stand_in, 200)]
        sent = emulator.requests[-1]
        if kind == "anthropic":  # the session's own stored bytes, as its primary sends them
            assert sent.system_json == emulator.requests[0].system_json
            assert sent.tools_json == emulator.requests[0].tools_json
        else:  # the same stored bytes, in the other provider's wire format
            assert sent.json["messages"][0] == {"role": "system", "content": session.system_prompt.text()}
            assert [t["function"]["name"] for t in sent.json["tools"]] == [t["name"] for t in session.tools]
        assert sent.cache_read == 0  # a new cache prefix on the fallback

        # known to fail: no one waits on it, and no probe before the interval has passed
        again = await turn(runtime, session, "three", emulator)
        assert again.notices == (line,)
        assert [r.model for r in emulator.requests[6:]] == [stand_in]
        assert failover_of(runtime).outage(primary_of(runtime)) is not None

        emulator.clock.advance(30)  # the minute is over; the probe interval too
        await turn(runtime, session, "four", emulator)  # answered by the fallback; it starts a probe
        await wait_until(lambda: failover_of(runtime).outage(primary_of(runtime)) is None, what="the probe")
        [probe] = [r for r in emulator.requests[7:] if r.model == SONNET]
        assert probe.ok and probe.json["max_tokens"] == 1 and probe.prompt_tokens <= 30

        back = await turn(runtime, session, "five", emulator)
        assert back.notices == ()
        assert emulator.requests[-1].model == SONNET and emulator.requests[-1].ok
        rows = await recorded(runtime)
        misses = await runtime.store.cache_misses.of_session(session.id)

    # every request recorded under the model that answered it, priced at that model's prices
    assert [(purpose, model) for purpose, model, *_ in rows] == [
        ("turn", SONNET),
        ("turn", stand_in),
        ("turn", stand_in),
        ("turn", stand_in),
        ("probe", SONNET),
        ("turn", SONNET),
    ]
    answered = [r for r in emulator.requests if r.ok]
    for (_, model, _, uncached, read), request in zip(rows, answered, strict=True):
        assert model == request.model and read == request.cache_read
        assert uncached == request.input_tokens
    fallback_cost = rows[1][2]
    assert fallback_cost == pytest.approx(cost(usage_of(answered[1]), lookup_model(stand_in)), rel=1e-6)
    # the cache check calls a switch a switch: never a changed prompt (a bug) nor the provider's eviction
    assert {miss.cause for miss in misses} <= {"model_changed"}
    assert any(m.model == stand_in and m.request_id is not None for m in misses)
    assert not [r for r in caplog.records if "system prompt changed" in r.getMessage()]


def usage_of(request: RecordedRequest) -> Any:
    from agent.usage import Usage

    write_1h = request.cache_write_1h
    return Usage(
        input_tokens=request.input_tokens,
        output_tokens=request.output_tokens,
        cache_read_tokens=request.cache_read,
        cache_write_5m_tokens=request.cache_write - write_1h,
        cache_write_1h_tokens=write_1h,
    )


async def test_text_the_failing_model_streamed_is_taken_back_before_the_fallback_answers(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The primary breaks off mid-answer on every attempt: what it streamed is not the answer; the
    person is told to discard it, then reads the fallback's answer once, with the line."""
    async with open_agent_runtime(config(emulator_url, fallback("anthropic", emulator_url)), home) as runtime:
        session = await new_session(runtime)
        emulator.fail_midstream("overloaded_error", count=4)  # the primary's attempt and its 3 retries
        emulator.script(Reply(text="The whole answer."))
        events = EventLog()
        result = await run_turn(runtime, session, "hello", events)
    assert result.error is None and result.text == "The whole answer."
    assert result.notices == (OVERLOADED.format(HAIKU),)
    [switch] = [e for e in events.events if isinstance(e, FailingOver)]
    assert switch.model == HAIKU and switch.discard_partial
    at = events.events.index(switch)
    assert "".join(e.text for e in events.events[at + 1 :] if isinstance(e, TextDelta)) == "The whole answer."
    assert [(r.model, r.ok) for r in emulator.requests] == [(SONNET, False)] * 4 + [(HAIKU, True)]


async def test_a_request_refused_as_invalid_is_not_sent_to_a_fallback(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(config(emulator_url, fallback("anthropic", emulator_url)), home) as runtime:
        session = await new_session(runtime)
        emulator.fail_next(400, model=SONNET)
        result = await run_turn(runtime, session, "hello")
        assert failover_of(runtime).outage(primary_of(runtime)) is None
    assert result.error is not None and result.error.startswith("The model provider rejected the request")
    assert [r.model for r in emulator.requests] == [SONNET]


async def test_a_spend_limit_is_not_a_reason_to_ask_another_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The primary fails; its first fallback (an expensive one) is refused by the day's limit before it is
    sent: the turn ends with the limit's sentence, and the cheaper fallback after it is not asked."""
    expensive = {"provider": "anthropic", "name": "claude-opus-4-1"}  # 5x the primary's prices
    budgets = {"bot": {"daily_usd": 0.01}}  # covers a request to the primary, not one to the expensive one
    cheaper = fallback("anthropic", emulator_url)
    settings = config(emulator_url, expensive, cheaper, budgets=budgets, model={"max_tokens": 100})
    async with open_agent_runtime(settings, home) as runtime:
        session = await new_session(runtime)
        emulator.fail_for(60, 529, model=SONNET)
        result = await run_turn(runtime, session, "hello")
    assert result.refused is not None and result.error is not None and "spend limit" in result.error
    assert [r.model for r in emulator.requests] == [SONNET] * 4


async def test_a_background_review_waits_for_the_sessions_own_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """A review is not urgent: during an outage it fails rather than write the conversation into the
    fallback's cache; once one is answered by the session's own model, that model is known to be back."""
    assert REVIEW in WAITS_FOR_PRIMARY
    async with open_agent_runtime(config(emulator_url, fallback("anthropic", emulator_url)), home) as runtime:
        synced(runtime, emulator)
        session = await new_session(runtime)
        await turn(runtime, session, "one", emulator)
        emulator.fail_for(60, 529, model=SONNET)
        await turn(runtime, session, "two", emulator)  # answered by the fallback: an outage
        result = await review(runtime.agent, session, max_iterations=2)
        assert result.error is not None and "overloaded" in result.error
        reviews_during = [r.model for r in emulator.requests[6:]]

        emulator.clock.advance(40)  # the minute is over; no probe has run (a review starts none)
        assert failover_of(runtime).outage(primary_of(runtime)) is not None
        emulator.script(Reply(text="Nothing to keep."))
        assert (await review(runtime.agent, session, max_iterations=2)).error is None
        assert failover_of(runtime).outage(primary_of(runtime)) is None
        await turn(runtime, session, "three", emulator)
    assert reviews_during == [SONNET] * 4
    assert [r.model for r in emulator.requests[10:]] == [SONNET, SONNET]  # the review, then the turn


async def test_a_fallback_without_its_key_stops_the_start_with_where_to_put_it(
    emulator_url: str, home: HeraldHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FALLBACK_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"model\.fallbacks: No API key for openai: set FALLBACK_KEY"):
        async with open_agent_runtime(config(emulator_url, fallback("openai", emulator_url)), home):
            pass


# -- the rules, without I/O --------------------------------------------------------------------------


def error(status: int | None = None, kind: str = "status", retryable: bool = True) -> ProviderError:
    return ProviderError("x", retryable=retryable, status=status, kind=kind)


def test_only_the_providers_own_failures_fail_over() -> None:
    for failure in (
        error(529, "overloaded_error"),
        error(500, "api_error"),
        error(429, "rate_limit_error"),
        error(kind="timeout"),
        error(kind="connection"),
        error(kind="unreachable"),
        error(kind="malformed"),
    ):
        assert fails_over(failure), failure.kind
    for failure in (
        error(400, "invalid_request_error", retryable=False),
        error(401, "authentication_error", retryable=False),
        error(kind="budget", retryable=False),
        error(kind="configuration", retryable=False),
        error(kind="internal", retryable=False),
    ):
        assert not fails_over(failure), failure.kind


def test_the_line_says_what_is_wrong_and_who_answers() -> None:
    assert [
        failure_reason(e) for e in (error(529), error(kind="timeout"), error(503), error(kind="connection"))
    ] == [
        "is overloaded",
        "is not answering in time",
        "has an internal error (HTTP 503)",
        "keeps dropping the connection",
    ]
    one = FailedOver(SONNET, HAIKU, "is overloaded")
    assert one.line == "The main model is overloaded; this answer comes from claude-haiku-4-5."
    two = FailedOver(SONNET, MINI, "is overloaded")
    assert failover_line([one, one, two]) == (
        "The main model is overloaded; this answer comes from claude-haiku-4-5 and gpt-5-mini."
    )
    assert failover_line([]) is None


class Client:
    """A stand-in provider client: only its identity and model matter to the chain."""

    def __init__(self, model: str) -> None:
        self.model = model


def test_an_outage_is_probed_once_per_interval_and_ends_when_a_probe_is_answered() -> None:
    keys = (ProviderKey("anthropic", SONNET), ProviderKey("anthropic", HAIKU))
    clients: dict[ProviderKey, Any] = {key: Client(key.model) for key in keys}
    failover = Failover(list(clients), lambda key: clients[key], probe_interval=INTERVAL)
    primary: Any = clients[ProviderKey("anthropic", SONNET)]
    assert [c.model for c in failover.fallbacks(primary)] == [HAIKU]  # never itself

    failover.failed(primary, error(529), now=100.0)
    assert not failover.probe_due(primary, 129.0)
    assert failover.probe_due(primary, 130.0)
    assert not failover.probe_due(primary, 131.0)  # one in flight at a time
    failover.probed(primary, error(529), now=131.0)
    assert not failover.probe_due(primary, 160.0) and failover.probe_due(primary, 161.0)
    failover.postpone(primary, 162.0)  # not sent (a spend limit): as if it had failed
    assert failover.probe_due(primary, 192.0)
    failover.probed(primary, None, now=193.0)
    assert failover.outage(primary) is None and not failover.probe_due(primary, 500.0)


def test_a_fallback_that_cannot_be_built_is_left_out() -> None:
    def clients(key: ProviderKey) -> Any:
        if key.model == MINI:
            raise ProviderError("No API key for openai", retryable=False, kind="configuration")
        return Client(key.model)

    failover = Failover(
        [ProviderKey("openai", MINI), ProviderKey("anthropic", HAIKU)], clients, probe_interval=INTERVAL
    )
    assert [c.model for c in failover.fallbacks(Client(SONNET))] == [HAIKU]  # type: ignore[arg-type]
