"""Many long requests at the same moment stay within every limit: each is reserved at what it can cost
(its whole ``max_tokens`` answer), and its ``max_tokens`` is lowered to what its limits can still pay
after the requests already in flight. Real concurrent turns through the anthropic SDK against the
emulator, on each database; every answer runs to its ``max_tokens`` (the most it can cost).

Also: every attempt of a request is admitted and billed on its own, and a stream that broke after the
provider started billing it is counted, not forgotten.
"""

from __future__ import annotations

import asyncio

import pytest

from agent.session import SessionSpec
from agent.spending.charge import Charge, Limit, Scope, charging
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.money.test_spend_agent import spent_by_purpose, window

pytestmark = [pytest.mark.each_database, pytest.mark.timeout(240)]

BOT = Scope("bot", "", (Limit("day", 0.10),))
LONG = "Please explain, in as much detail as you can, how a spend limit should work. " * 40  # ~800 tokens
MAX_TOKENS = 8000  # at $15 per million output tokens an answer can cost $0.12: more than a person's limit


def person(number: int) -> Scope:
    return Scope("person", f"test:{number}", (Limit("day", 0.05),))


async def turn(runtime: Runtime, number: int) -> str:
    """A person's turn in a chat of their own, charged to the bot and them: "answered" when some answer
    came (perhaps cut short by what was left), "refused" when a limit stopped it before anything."""
    spec = SessionSpec(session_key=f"test:chat:{number}", source="test", platform="terminal",
                       memory_scope="owner")  # fmt: skip
    session = (await runtime.new_session(spec)).record
    with charging(Charge((BOT, person(number)))):
        async with runtime.locks.hold(session.session_key) as lease:
            result = await runtime.agent.run_turn(lease, session, LONG)
    return "answered" if result.text else "refused" if result.refused is not None else str(result.error)


@pytest.mark.parametrize("people", [12, 50])
async def test_many_long_requests_at_once_spend_no_more_than_the_limits(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, people: int
) -> None:
    emulator.responder = lambda body, api: Reply(text_tokens=3 * MAX_TOKENS)  # cut at max_tokens: the most
    config = make_config(
        emulator_url, model={"max_tokens": MAX_TOKENS}, agent={"max_concurrent_requests": people}
    )
    async with open_agent_runtime(config, home) as runtime:
        outcomes = await asyncio.gather(*(turn(runtime, number) for number in range(people)))
        bot = await window(runtime, BOT)
        persons = [await window(runtime, person(number)) for number in range(people)]
        purposes = await spent_by_purpose(runtime)
    assert bot == pytest.approx(sum(purposes.values()))  # every request counted
    assert bot <= BOT.limits[0].usd  # the bot's limit holds, to the cent and below
    assert max(persons) <= 0.05  # and each person's
    assert bot > 0.8 * BOT.limits[0].usd, (bot, persons)  # the limit was really used, not refused early
    assert "answered" in outcomes and "refused" in outcomes


async def test_each_retry_is_admitted_again_and_a_broken_stream_is_billed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = lambda body, api: Reply(text_tokens=300)
    emulator.drop_midstream(count=2, after_text="Half an answer, and then the connection was cut. " * 20)
    config = make_config(emulator_url, model={"max_tokens": 400})
    async with open_agent_runtime(config, home) as runtime:
        assert await turn(runtime, 1) == "answered"  # the third attempt answered
        bot = await window(runtime, BOT)
        purposes = await spent_by_purpose(runtime)
        rows = await runtime.storage.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM requests")
                                          .scalar_one())  # fmt: skip
    assert len(emulator.requests) == 3 and rows == 3  # the two broken attempts are on the bill
    assert bot == pytest.approx(sum(purposes.values()))
