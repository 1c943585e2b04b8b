"""Paid services that are not models count like model requests: a voice note's transcription, a spoken
reply and a web search are charged to the chat, the person and the bot, at what the service billed, and
one a limit cannot pay is never sent.

Real python-telegram-bot against the fake Bot API; the real openai SDK against the emulator's
transcription and speech endpoints (its usage reports the audio's length, as OpenAI's does); Brave's
search API served by the fake web.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from agent.db.schema import requests
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.web import BRAVE_KEY, FakeWeb
from tests.gateway_support import FRIEND, Harness, telegram_gateway
from tests.media.test_spoken_replies import speech, stt
from tests.media_files import voice_note
from tests.money.test_spend_gateway import ZONE, spent
from tests.spend_support import crossing, dollars

pytestmark = pytest.mark.timeout(120)

CHAT, PERSON = f"chat:telegram:dm:{FRIEND}", f"person:telegram:{FRIEND}"
WHISPER_PER_MINUTE = 0.006  # OpenAI's list price of whisper-1, the default stt.model
PLENTY = {"chat": {"daily_usd": 5.0}, "person": {"daily_usd": 5.0}, "bot": {"daily_usd": 50.0}}


async def recorded(harness: Harness) -> dict[str, float]:
    """What was recorded, summed per purpose."""
    query = sa.select(requests.c.purpose, sa.func.sum(requests.c.estimated_cost)).group_by(requests.c.purpose)
    storage = harness.gateway.services.runtime.storage
    return await storage.read(
        lambda conn: {purpose: float(cost) for purpose, cost in conn.execute(query).all()}
    )


async def test_a_voice_notes_transcription_and_its_spoken_answer_count_in_the_chats_and_the_persons_scopes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Nine it is."))
    async with telegram_gateway(
        home,
        emulator,
        emulator_url,
        budgets=PLENTY,
        scheduler=ZONE,
        stt=stt(emulator_url),
        tts=speech(emulator_url),
    ) as harness:
        harness.fake.private_message(FRIEND, "", voice=voice_note("can we meet tomorrow at nine", seconds=3))
        await harness.settled()
        [answer] = harness.visible(FRIEND)
        costs = await recorded(harness)
        chat, person, bot = [await spent(harness, scope) for scope in (CHAT, PERSON, "bot")]
    [heard] = emulator.transcriptions
    assert answer.kind == "voice"
    assert set(costs) == {"transcription", "turn", "speech"}
    assert heard.seconds > 0 and costs["transcription"] == pytest.approx(
        heard.seconds / 60 * WHISPER_PER_MINUTE
    )
    assert (chat, person, bot) == pytest.approx((sum(costs.values()),) * 3)  # every service, every scope


async def test_a_voice_note_the_chats_limit_cannot_pay_is_not_transcribed_and_the_chat_is_told(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The limit is not used up, so the message is let in, but hearing the voice note would cross it:
    nothing is sent to the transcription service or the model, and the refusal says what it needed."""
    budgets = {"chat": {"daily_usd": 0.0001}}  # one second of whisper-1
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, stt=stt(emulator_url)
    ) as harness:
        harness.fake.private_message(
            FRIEND, "", voice=voice_note("a long story about my holiday", seconds=30)
        )
        await harness.settled()
        [told] = harness.texts(FRIEND)
        costs = await recorded(harness)
    parts = crossing(told.removeprefix("⚠️ "))
    assert dollars(parts["needed"]) > dollars(parts["left"])
    assert emulator.transcriptions == [] and emulator.requests == []
    assert costs == {}


async def test_a_web_search_counts_at_its_price_in_the_chats_and_the_persons_scopes(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    fake_web: FakeWeb,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", BRAVE_KEY)  # the runtime reads search keys from its environment
    emulator.script(
        Reply(tool_calls=[ToolUse("web_search", {"query": "barn owls"})]), Reply(text="Owls hoot.")
    )
    web = {"search": {"provider": "brave", "brave_url": f"{fake_web.url}/brave", "price_per_query": 0.01}}
    async with telegram_gateway(
        home,
        emulator,
        emulator_url,
        budgets=PLENTY,
        scheduler=ZONE,
        web=web,
        environ={"BRAVE_API_KEY": BRAVE_KEY},
    ) as harness:
        harness.fake.private_message(FRIEND, "what sound does a barn owl make?")
        await harness.settled()
        [answer] = harness.texts(FRIEND)
        costs = await recorded(harness)
        chat, person, bot = [await spent(harness, scope) for scope in (CHAT, PERSON, "bot")]
    assert answer == "Owls hoot."
    assert fake_web.paths() == ["/brave"]
    assert set(costs) == {"search", "turn"} and costs["search"] == pytest.approx(0.01)
    assert (chat, person, bot) == pytest.approx((sum(costs.values()),) * 3)


async def test_a_web_search_a_limit_cannot_pay_is_not_sent_and_the_model_is_told_why(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    fake_web: FakeWeb,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAVE_API_KEY", BRAVE_KEY)  # the runtime reads search keys from its environment
    emulator.script(
        Reply(tool_calls=[ToolUse("web_search", {"query": "barn owls"})]), Reply(text="No search.")
    )
    web = {"search": {"provider": "brave", "brave_url": f"{fake_web.url}/brave", "price_per_query": 1.0}}
    async with telegram_gateway(
        home,
        emulator,
        emulator_url,
        budgets={"person": {"daily_usd": 0.5}},
        scheduler=ZONE,
        web=web,
        environ={"BRAVE_API_KEY": BRAVE_KEY},
    ) as harness:
        harness.fake.private_message(FRIEND, "what sound does a barn owl make?")
        await harness.settled()
        costs = await recorded(harness)
    assert fake_web.paths() == []  # the search service was never asked
    [result] = [
        block
        for block in emulator.requests[1].json["messages"][-1]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    assert result.get("is_error") and "Search not sent" in str(result["content"])
    assert "search" not in costs
