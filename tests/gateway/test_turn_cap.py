"""One turn cap for every way in: a chat's turn, a request of the OpenAI-compatible API and a cron job's run
take slots of the same ``gateway.max_concurrent_turns`` (``gateway.intake.turn_cap``), so an operator's
cap on the model work the gateway does at once holds whichever way the work came in.

The real python-telegram-bot against the fake Bot API, the real openai SDK as the API's client, the
provider emulator as the model; every wait is for a state.
"""

from __future__ import annotations

import asyncio

from openai import AsyncOpenAI

from gateway.cron.jobs import RunStatus
from gateway.cron.manage import COMMAND_LINE
from gateway.home import HeraldHome
from gateway.openai_api.server import PREFIX
from tests.emulator import ProviderEmulator
from tests.fakes.waiting import wait_until
from tests.gateway_support import FRIEND, telegram_gateway

KEY = "alice-key-0123456789abcdef"


async def test_with_a_cap_of_one_a_chat_an_api_request_and_a_cron_run_never_ask_the_model_at_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.hold_streams(3)  # every model answer stops half-way until released: all three would overlap
    async with telegram_gateway(
        home, emulator, emulator_url,
        gateway={"max_concurrent_turns": 1},
        api={"keys": [{"key": "$HERALD_API_KEY_ALICE", "person": "api:alice"}]},
        review={"enabled": False},
        environ={"HERALD_API_KEY_ALICE": KEY},
    ) as harness:  # fmt: skip
        gateway = harness.gateway
        job = await gateway.services.runtime.cron.create(
            COMMAND_LINE, prompt="Anything new?", schedule="every 1h", name="News",
            target=f"telegram:{FRIEND}",
        )  # fmt: skip
        harness.fake.private_message(FRIEND, "hello")
        await wait_until(lambda: emulator.in_flight == 1, what="the chat's turn at the model")
        client = AsyncOpenAI(base_url=gateway.http.url + PREFIX, api_key=KEY, max_retries=0, timeout=30.0)
        try:
            asked = asyncio.create_task(
                client.chat.completions.create(model="herald", messages=[{"role": "user", "content": "hi"}])
            )
            run = asyncio.create_task(gateway.scheduler.run_now(job.id))
            turns = gateway.services.turns
            await wait_until(
                lambda: turns.waiting + emulator.in_flight == 3,
                what="the API's turn and the job's run waiting for a slot or at the model",
            )
            emulator.release_streams()
            answer = await asyncio.wait_for(asked, 30)
            status = await asyncio.wait_for(run, 30)
            await harness.settled()
        finally:
            await client.close()
    assert emulator.max_in_flight == 1
    assert answer.choices[0].message.content
    assert status is RunStatus.OK
    assert len(harness.texts(FRIEND)) == 2  # the chat's answer and the job's
