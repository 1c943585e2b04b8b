"""What is Slack's own, beyond the conformance suite: a Socket Mode connection that dies silently or is
dropped with reconnections refused (``/readyz``), the Events API's signatures and retries, slash
commands over HTTP and their private replies through ``response_url``, a mention in a thread, files
that answer with a sign-in page."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest

from adapters.base import Attachment, DeliveryError
from adapters.slack import files
from adapters.slack.spec import SIGNING_SECRET
from gateway.home import HeraldHome
from tests.conformance.harness import running, user_texts
from tests.conformance.slack_driver import CHANNEL, SlackDriver
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.slack.server import FORM
from tests.fakes.slack.server import SIGNING_SECRET as FAKE_SECRET
from tests.fakes.waiting import wait_until, wait_until_awaited

REPLACED = "Slack Socket Mode connection replaced"


class EventsDriver(SlackDriver):
    """The same fake, with the Events API's signing secret set."""

    def environ(self) -> dict[str, str]:
        return {**super().environ(), SIGNING_SECRET.env: FAKE_SECRET}


def asked(emulator: ProviderEmulator) -> list[str]:
    """What each model request was asked (its last user message: earlier ones are the history)."""
    return [user_texts(request)[-1] for request in emulator.requests]


async def test_a_socket_that_stops_answering_pings_is_replaced_and_the_gap_caught_up_once(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    driver = SlackDriver()
    place = driver.dm_place(driver.friend)
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.dm(driver.friend, "before the gap")
        await platform.settled()
        driver.fake.silence()  # no close frame: pings go unanswered, events vanish
        driver.dm(driver.friend, "lost in the gap one")
        driver.dm(driver.friend, "lost in the gap two")
        await wait_until(lambda: driver.fake.connections >= 2 and driver.fake.live(), what="a new socket")
        await wait_until(lambda: len(driver.messages(place)) >= 2, what="the gap answered")
        await platform.settled()
        driver.dm(driver.friend, "after the gap")
        await platform.settled()
        answers = driver.messages(place)
    said = asked(emulator)
    for text in ("before the gap", "lost in the gap one", "lost in the gap two", "after the gap"):
        assert sum(text in line for line in said) == 1, (text, said)  # nothing lost, nothing doubled
    assert len(answers) == len(emulator.requests)  # one answer per turn
    replaced = [r.getMessage() for r in caplog.records if REPLACED in r.getMessage()]
    # A loaded machine may delay a healthy socket's pongs past four intervals (2 s here) and have it
    # replaced too, catching up nothing: the gap is caught up by one replacement, and only once.
    assert sum("caught up 2 message(s)" in line for line in replaced) == 1, replaced


async def readiness(url: str) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client,
        client.get(f"{url}/readyz") as response,
    ):
        return response.status, await response.json()


async def test_readyz_says_not_ready_while_the_socket_is_down_and_reconnecting_fails(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    driver = SlackDriver()
    fake = driver.fake

    def refused() -> int:
        return sum(call.status == 503 for call in fake.calls_to("apps.connections.open"))

    async def ready() -> dict[str, Any] | None:
        status, report = await readiness(url)
        return report if status == 200 else None

    async with running(driver, home, emulator, emulator_url) as platform:
        url = platform.gateway.http.url
        assert await ready()
        fake.drop(refuse_reconnects=True)
        await wait_until(lambda: refused() >= 2, what="two refused reconnections")  # the first one answered
        status, report = await readiness(url)
        fake.accept_reconnects()
        back = await wait_until_awaited(ready, what="/readyz 200 after reconnecting", describe=fake.describe)
    assert status == 503, report
    [problem] = report["problems"]
    assert problem.startswith("slack: not connected: Socket Mode connection down; reconnecting failed:")
    assert "service_unavailable" in problem
    assert back == {"ready": True, "problems": []} and fake.connections == 2


async def test_a_retried_events_api_post_is_answered_once(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text="Once."))
    driver = EventsDriver()
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.fake.events_to(f"{platform.gateway.http.url}/slack/events")
        sent = driver.dm(driver.friend, "answer me once")
        await wait_until(lambda: driver.fake.event_posts, what="the first POST answered")
        await driver.redeliver(sent)  # X-Slack-Retry-Num: 1
        await wait_until(lambda: len(driver.fake.event_posts) == 2, what="the retry answered")
        await platform.settled()
        answers = driver.messages(driver.dm_place(driver.friend))
    assert driver.fake.event_posts == [(0, 200), (1, 200)]
    assert [answer.text for answer in answers] == ["Once."] and len(emulator.requests) == 1


@pytest.mark.parametrize(("secret", "age"), [("not-the-secret", 0), (FAKE_SECRET, 600)])
async def test_a_post_with_a_bad_or_old_signature_is_refused(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, secret: str, age: float
) -> None:
    driver = EventsDriver()
    event = {"type": "message", "channel": "DUFRIEND", "channel_type": "im", "user": driver.friend,
             "text": "forged", "ts": "1700000000.000001"}  # fmt: skip
    body = json.dumps({"type": "event_callback", "team_id": "T0FAKE", "event": event}).encode()
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.fake.events_to(f"{platform.gateway.http.url}/slack/events")
        status = await driver.fake.post_signed(body, secret=secret, age=age)
        await platform.settled()
    assert status == 401 and emulator.requests == []


@pytest.mark.parametrize("timestamp", [None, "", "soon", "1700000000.5", "１７００"])
async def test_a_post_without_a_whole_number_timestamp_is_refused_in_one_line(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, caplog: pytest.LogCaptureFixture,
    timestamp: str | None,
) -> None:  # fmt: skip
    """Not Slack's (a scanner, a misconfigured proxy): 401 and one warning, never a 500 and a traceback."""
    driver = EventsDriver()
    headers = {"X-Slack-Signature": "v0=00", "Content-Type": "application/json"}
    if timestamp is not None:
        headers["X-Slack-Request-Timestamp"] = timestamp
    async with running(driver, home, emulator, emulator_url) as platform, aiohttp.ClientSession() as session:
        url = f"{platform.gateway.http.url}/slack/events"
        async with session.post(url, data=b'{"type": "event_callback"}', headers=headers) as response:
            await response.read()
            status = response.status
    slack = [r for r in caplog.records if r.name.startswith("adapters.slack")]
    refused = [r for r in slack if r.levelno >= logging.WARNING]
    assert status == 401 and emulator.requests == []
    assert [r.getMessage() for r in refused] == ["Refused a Slack POST with a bad or expired signature"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_failed_catch_up_names_the_call_that_failed(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    driver = SlackDriver()
    driver.fake.fail_next("users.conversations", 1, retry_after=0.0)
    async with running(driver, home, emulator, emulator_url):
        [warned] = await wait_until(
            lambda: [r.getMessage() for r in caplog.records if "catch-up" in r.getMessage()],
            what="the catch-up's warning",
        )
    assert "Slack users.conversations failed: ratelimited" in warned, warned
    assert "conversations.history" not in warned


@pytest.mark.slow
async def test_slash_commands_posted_over_http_are_answered_privately_or_in_the_channel(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """The Events API mode (no socket): ``/herald help`` is private, so its answer goes to the asker
    alone through the command's ``response_url``; ``/herald new`` is answered in the channel for all;
    a form with a bad signature is refused 401 and nothing of it is stored or answered."""
    driver = EventsDriver()
    fake = driver.fake
    async with running(driver, home, emulator, emulator_url) as platform:
        fake.events_to(f"{platform.gateway.http.url}/slack/events")
        helped = fake.slash_command(driver.friend, CHANNEL, "/herald", "help")
        await wait_until(lambda: fake.event_posts, what="the command's POST answered")
        await platform.settled()
        fake.slash_command(driver.friend, CHANNEL, "/herald", "new")
        await wait_until(lambda: len(fake.event_posts) == 2, what="the second command's POST answered")
        await platform.settled()
        forged = {**helped, "text": "status", "trigger_id": "forged.trigger"}
        await fake.post_signed(urlencode(forged).encode(), secret="not-the-secret", content_type=FORM)
        await platform.settled()
        inbox = platform.gateway.services.inbox
        stored_forged = await inbox.find("slack", CHANNEL, "command:forged.trigger")
        stored_help = await inbox.find("slack", CHANNEL, f"command:{helped['trigger_id']}")
    said = [m for m in fake.messages if m.bot and m.channel == CHANNEL]
    private = [m for m in said if m.ephemeral_to is not None]
    public = [m for m in said if m.ephemeral_to is None]
    assert fake.event_posts == [(0, 200), (0, 200), (0, 401)]
    assert [(m.ephemeral_to, m.text.splitlines()[0]) for m in private] == [(driver.friend, "Commands:")]
    assert "/new" in private[0].text
    assert len(public) == 1 and public[0].text.startswith("New session started")
    assert [c.args["channel"] for c in fake.calls_to("chat.postMessage")] == [CHANNEL]  # help: not posted
    assert stored_help is not None and stored_forged is None and emulator.requests == []


async def test_a_mention_in_a_thread_is_answered_there_with_the_threads_earlier_messages(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    driver = SlackDriver()
    async with running(driver, home, emulator, emulator_url) as platform:
        thread = driver.thread()  # the admin's "thread 1"
        driver.group(driver.friend, "the deploy failed at step 3", place=thread)
        driver.group(driver.friend, "what went wrong?", mention=True, place=thread)
        await platform.settled()
        in_thread, in_channel = driver.messages(thread), driver.messages(driver.group_place())
        [reply] = driver.fake.bot_messages(CHANNEL, thread.thread_id)
    [said] = asked(emulator)
    assert "thread 1" in said and "the deploy failed at step 3" in said and said.endswith("what went wrong?")
    assert len(in_thread) == 1 and in_channel == [] and not reply.reply_broadcast
    system = "".join(block["text"] for block in emulator.requests[0].json["system"])
    assert "deploy failed" not in system  # context goes with the message, never into the prompt


async def test_a_file_url_that_answers_with_a_sign_in_page_is_refused() -> None:
    driver = SlackDriver()
    async with driver.fake.serve(), aiohttp.ClientSession() as session:
        event = driver.fake.post(
            driver.friend, "DUFRIEND", "here", files=[("a.pdf", b"%PDF-1.4", "application/pdf")]
        )
        file = event["files"][0]
        attachment = Attachment("document", file["url_private_download"], "a.pdf", "application/pdf")
        assert await files.download(session, "xoxb-fake-bot-token", attachment, 1000) == b"%PDF-1.4"
        with pytest.raises(DeliveryError, match="sign-in page") as refused:
            await files.download(session, "xoxb-wrong", attachment, 1000)
    assert refused.value.permanent
