"""Background reviews in the gateway: on schedule, from the chat's cache, never in a live turn's way."""

from __future__ import annotations

import json
import time
from typing import Any

from agent.side import REVIEW_TASK
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.fakes import FakeTelegram
from tests.fakes.waiting import wait_until
from tests.gateway_support import FRIEND, Harness, telegram_gateway
from tests.helpers import write_project_notes

FACT = "Ada's favourite editor is Helix."


def is_review(request: RecordedRequest) -> bool:
    return REVIEW_TASK in json.dumps(request.json["messages"][-1])


class ReviewingModel:
    """Answers chat turns; a review saves one fact and reports it."""

    def __call__(self, body: dict[str, Any], api: str) -> Reply | None:
        last = json.dumps(body["messages"][-1])
        if "[Herald: background review]" in last:
            return Reply(tool_calls=[ToolUse("memory", {"action": "add", "target": "user", "content": FACT})])
        if "tool_result" in last:
            return Reply(text="Saved.")
        return Reply(text_tokens=150)


def reviews(emulator: ProviderEmulator) -> list[RecordedRequest]:
    return [r for r in emulator.requests if is_review(r)]


async def reviews_done(harness: Harness, count: int) -> list[RecordedRequest]:
    """Wait for ``count`` finished review requests and no review running."""

    def done() -> list[RecordedRequest] | None:
        found = reviews(harness.emulator)
        return found if len(found) >= count and harness.gateway.services.reviews.running == 0 else None

    found = await wait_until(done, what=f"{count} review(s) done")
    assert found is not None
    return found


async def test_a_review_runs_every_n_turns_from_the_cache_and_saves_for_the_next_session(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    emulator.responder = ReviewingModel()
    async with telegram_gateway(home, emulator, emulator_url, review={"every_turns": 2}) as harness:
        harness.fake.private_message(FRIEND, "I edit everything in Helix.")
        await harness.settled()
        assert not [r for r in emulator.requests if is_review(r)]  # one turn: not yet
        harness.fake.private_message(FRIEND, "Anyway, what's new?")
        await harness.settled()
        [review] = await reviews_done(harness, 1)
        store = harness.gateway.services.runtime.store
        [session] = await store.sessions.recent()
        assert await store.reviews.turns_since_review(session.id) == 0
        harness.fake.private_message(FRIEND, "/new")
        await harness.settled()
        newest = await store.sessions.latest(session.session_key)
    turn = emulator.requests[1]
    assert review.system_json == turn.system_json and review.tools_json == turn.tools_json
    assert review.cache_read >= turn.cache_read + turn.cache_write > 0  # everything the turn sent
    assert FACT not in session.system_prompt.volatile
    assert newest is not None and FACT in newest.system_prompt.volatile


async def test_a_live_turn_cancels_a_running_review(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    model = ReviewingModel()

    def hold_the_first_review(body: dict[str, Any], api: str) -> Reply | None:
        if not reviews(emulator):  # this request is the first review: it stops half-way
            model_is_reviewing = "[Herald: background review]" in json.dumps(body["messages"][-1])
            if model_is_reviewing:
                emulator.hold_streams()
        return model(body, api)

    emulator.responder = hold_the_first_review
    async with telegram_gateway(home, emulator, emulator_url, review={"every_turns": 1}) as harness:
        harness.fake.private_message(FRIEND, "first")
        await wait_until(lambda: emulator.holding, what="the review answering half-way")
        harness.fake.private_message(FRIEND, "second, right away")
        await wait_until(lambda: not emulator.holding, what="the review cancelled by the live turn")
        emulator.release_streams()
        await harness.settled()
        answers = harness.texts(FRIEND)
        await reviews_done(harness, 2)  # the one cancelled, and the one after the second turn
        metrics = harness.gateway.services.metrics.render().decode()
    assert len(answers) == 2
    assert 'gateway_reviews_total{outcome="cancelled"} 1.0' in metrics
    assert 'gateway_reviews_total{outcome="done"} 1.0' in metrics


async def test_the_review_schedule_survives_a_restart_and_idle_chats_are_reviewed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ReviewingModel()
    sections: dict[str, Any] = {"review": {"every_turns": 3, "idle_after": 600}}
    telegram = FakeTelegram()  # one Telegram across the restart: message ids go on
    async with telegram_gateway(home, emulator, emulator_url, fake=telegram, **sections) as harness:
        for text in ("one", "two"):
            harness.fake.private_message(FRIEND, text)
            await harness.settled()
    async with telegram_gateway(home, emulator, emulator_url, fake=telegram, **sections) as harness:
        harness.fake.private_message(FRIEND, "three")
        await harness.settled()
        await reviews_done(harness, 1)  # the third turn counts the two from before the restart
        harness.fake.private_message(FRIEND, "four")
        await harness.settled()
        reviews = harness.gateway.services.reviews
        assert await reviews.sweep() == 0  # not idle yet
        reviews.clock = lambda: time.time() + 3600
        assert await reviews.sweep() == 1
        await reviews_done(harness, 2)


async def test_a_failed_turn_does_not_count_towards_the_next_review(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ReviewingModel()
    async with telegram_gateway(home, emulator, emulator_url, review={"every_turns": 2}) as harness:
        emulator.fail_next(400)  # not retried: the turn fails and leaves the conversation
        harness.fake.private_message(FRIEND, "this one fails")
        await harness.settled()
        harness.fake.private_message(FRIEND, "this one is answered")
        await harness.settled()
        store = harness.gateway.services.runtime.store
        [session] = await store.sessions.recent()
        unreviewed = await store.reviews.turns_since_review(session.id)
        harness.fake.private_message(FRIEND, "and this one makes two")
        [review] = await reviews_done(harness, 1)  # due now, so it was not due after the first answer
    assert unreviewed == 1
    third = next(i for i, r in enumerate(emulator.requests) if "makes two" in json.dumps(r.json["messages"]))
    assert emulator.requests.index(review) > third  # the first review came after the third message
