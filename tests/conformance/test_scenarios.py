"""What every adapter does with the gateway around it, the same on every platform (see ``__init__``).

Each scenario runs once per platform driver (``drivers.py``); docs/adding-a-platform.md gives
the count. The words of a platform appear only in its driver.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.base import OutboundFile
from adapters.registry import PLATFORMS
from gateway import tables
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from tests.conformance.driver import Driver
from tests.conformance.drivers import DRIVERS
from tests.conformance.harness import configure, gateway_process, running, user_texts
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import PROCESS_TIMEOUT, wait_until, wait_until_sync
from tests.media_files import photo

CODE_LINES = [f"    value_{n:03d} = compute({n}) + offset  # step {n}" for n in range(200)]
LONG_ANSWER = "**Read this first.** The whole program:\n\n```python\ndef main():\n" + "\n".join(
    CODE_LINES
) + "\n```\n\nThat is all."  # fmt: skip


ANSWER = "Hello, friend."


def system_text(request: Any) -> str:
    return "".join(block["text"] for block in request.json["system"])


def needs(driver: Driver, feature: str) -> None:
    """Skip a scenario about ``feature`` on a platform that does not have it (the driver says why)."""
    if feature in driver.absent:
        pytest.skip(f"{driver.spec.name} has no {feature}: {driver.absent[feature]}")


def test_every_registered_platform_has_a_driver() -> None:
    assert {spec.name for spec in PLATFORMS} == set(DRIVERS)


async def test_a_direct_message_is_answered(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text=ANSWER))
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.dm(driver.friend, "hello there")
        await platform.settled()
        answers = driver.messages(driver.dm_place(driver.friend))
        hint = platform.gateway.services.adapters[platform.name].prompt_hint
    assert [answer.text for answer in answers] == [ANSWER]
    [request] = emulator.requests
    assert user_texts(request) == ["hello there"]
    assert hint and f"# Platform\n\n{hint}" in system_text(request)  # the model knows where it writes


async def test_in_a_shared_chat_only_what_is_addressed_to_the_bot_is_answered(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    if not driver.shared_chats:
        pytest.skip(f"{driver.spec.title} has direct chats only")
    needs(driver, "shared chats")
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.group(driver.friend, "just talking among ourselves")
        ignored = {"platform": platform.name, "reason": "not_addressed"}
        await platform.counted("gateway_messages_ignored_total", ignored)
        driver.group(driver.friend, "what is the plan?", mention=True)
        await platform.settled()
        answers = driver.messages(driver.group_place())
    assert len(answers) == 1
    [request] = emulator.requests
    [said] = user_texts(request)
    assert said.lower().startswith(f"user{driver.friend}: ".lower()) and said.endswith(
        "what is the plan?"
    )  # who said it


async def test_a_message_delivered_again_is_answered_once(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with running(driver, home, emulator, emulator_url) as platform:
        sent = driver.dm(driver.friend, "only once please")
        await platform.settled()
        await driver.redeliver(sent)
        await platform.counted(
            "gateway_messages_ignored_total", {"platform": platform.name, "reason": "duplicate"}
        )
        await platform.settled()
        answers = driver.messages(driver.dm_place(driver.friend))
    assert len(answers) == 1 and len(emulator.requests) == 1


async def test_a_long_answer_is_split_within_the_limit_and_keeps_its_formatting(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text=LONG_ANSWER))
    async with running(driver, home, emulator, emulator_url) as platform:
        limit = platform.gateway.services.adapters[platform.name].capabilities.max_message_length
        if len(LONG_ANSWER) <= limit:
            pytest.skip(f"{platform.name} takes the whole answer in one message (up to {limit} characters)")
        driver.dm(driver.friend, "show me the program")
        await platform.settled()
        parts = driver.messages(driver.dm_place(driver.friend))
    assert len(LONG_ANSWER) > 2 * limit and len(parts) >= 3
    assert all(part.length <= limit for part in parts)
    assert parts[0].bold == ("Read this first.",)
    assert {language for part in parts for language, _ in part.code} == {"python"}  # each piece still Python
    shown = [line for part in parts for _, code in part.code for line in code.splitlines()]
    assert shown == ["def main():", *CODE_LINES]  # every line, in order, shown as code
    assert parts[-1].text.rstrip().endswith("That is all.")


async def test_an_answer_streamed_by_edits_ends_in_the_final_text(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    answer = "Here is what I found: " + " ".join(f"word{n}" for n in range(150)) + ". Done."
    emulator.hold_streams()  # half the answer is shown before the rest arrives
    emulator.script(Reply(text=answer))
    async with running(driver, home, emulator, emulator_url) as platform:
        can_edit = platform.gateway.services.adapters[platform.name].capabilities.can_edit
        if not can_edit and driver.edits:
            pytest.skip(f"{platform.name} cannot edit a sent message: an answer is sent once, whole")
        place = driver.dm_place(driver.friend)
        driver.dm(driver.friend, "stream it")
        if not driver.edits:  # a platform that cannot edit shows the answer once, whole
            await wait_until(lambda: emulator.holding, what="half the answer streamed")
            emulator.release_streams()
            await platform.settled()
            assert [shown.text for shown in driver.messages(place)] == [answer]
            return
        shown_half = await wait_until(lambda: driver.messages(place) if emulator.holding else [], what="half")
        [half] = shown_half
        emulator.release_streams()
        await platform.settled()
        [shown] = driver.messages(place)
    assert half.text.startswith("Here is what I found:") and half.text != answer
    assert shown.message_id == half.message_id and shown.versions >= 2  # the same message, edited
    assert shown.text == answer


async def test_a_429_with_retry_after_is_waited_out_through_the_send_pacing(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    """More 429s than the adapter waits out itself: the last reaches the gateway's send pacing, which
    holds the chat's sends for the time asked; the answer goes out once, never sooner."""
    needs(driver, "rate limits")
    emulator.script(Reply(text=ANSWER))
    async with running(driver, home, emulator, emulator_url, stream_edit_interval=0) as platform:
        driver.fail_sends(driver.rate_limit_burst, retry_after=1.0)
        driver.dm(driver.friend, "hello")
        await platform.counted("gateway_rate_limited_total", {"platform": platform.name})
        await platform.settled()
        answers = driver.messages(driver.dm_place(driver.friend))
        tries = driver.send_times()
    assert [answer.text for answer in answers] == [ANSWER]
    assert len(tries) == driver.rate_limit_burst + 1
    assert all(later - earlier >= 0.9 for earlier, later in itertools.pairwise(tries))


async def test_a_file_and_a_photo_that_arrive_reach_the_model(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.dm(driver.friend, "what does it say?", document=("notes.txt", b"The launch is on Friday."))
        await platform.settled()
        driver.dm(driver.friend, "and this?", photo=photo(800, 600))
        await platform.settled()
        answers = driver.messages(driver.dm_place(driver.friend))
    assert len(answers) == 2
    read, looked = emulator.requests
    [text] = user_texts(read)
    assert "The launch is on Friday." in text and text.endswith("what does it say?")
    blocks = looked.json["messages"][-1]["content"]
    assert [block["type"] for block in blocks].count("image") == 1


async def test_commands_come_from_the_one_table(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text=ANSWER))
    async with running(driver, home, emulator, emulator_url) as platform:
        place = driver.dm_place(driver.friend)
        driver.dm(driver.friend, "hello")
        await platform.settled()
        driver.command(driver.friend, "help", place)
        await platform.settled()
        driver.command(driver.friend, "new", place)
        await platform.settled()
        replies = [message.text for message in driver.messages(place)]
        menu = driver.published_commands()
        sessions = await platform.session_keys()
    assert replies[0] == ANSWER
    assert replies[1].startswith("Commands:") and "/new" in replies[1]
    assert replies[-1].startswith("New session started")
    assert len(emulator.requests) == 1  # commands reach no model
    if "command menu" not in driver.absent:
        assert {"help", "new", "stop", "model", "status"} <= menu  # the table, as the platform's menu
    assert len(sessions) == 2  # /new started one


async def test_a_thread_is_a_session_of_its_own_and_its_replies_stay_in_it(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    if not driver.shared_chats:
        pytest.skip(f"{driver.spec.title} has no threads")
    async with running(driver, home, emulator, emulator_url) as platform:
        if not platform.gateway.services.adapters[platform.name].capabilities.has_threads:
            pytest.skip(f"{platform.name} has no threads")
        thread = driver.thread()
        driver.group(driver.friend, "a question in the thread", mention=True, place=thread)
        await platform.settled()
        driver.group(driver.friend, "a question in the chat", mention=True)
        await platform.settled()
        in_thread, in_chat = driver.messages(thread), driver.messages(driver.group_place())
        sessions = await platform.session_keys()
    assert len(in_thread) == 1 and len(in_chat) == 1
    assert len(sessions) == 2
    asked = [user_texts(request)[-1] for request in emulator.requests]
    assert asked[0].endswith("a question in the thread") and asked[1].endswith("a question in the chat")
    assert len(user_texts(emulator.requests[1])) == 1  # the chat's session knows nothing of the thread


async def test_a_stranger_gets_a_pairing_code_at_most_and_costs_nothing(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with running(driver, home, emulator, emulator_url) as platform:
        driver.dm(driver.stranger, "let me in")
        driver.dm(driver.stranger, "hello??")
        if driver.shared_chats:
            driver.group(driver.stranger, "hey bot", mention=True)
        await platform.settled()
        in_dm = driver.messages(driver.dm_place(driver.stranger))
        in_group = driver.messages(driver.group_place()) if driver.shared_chats else []
    pairing = [] if "pairing" in driver.absent else [True]  # mail: a stranger gets nothing at all
    assert [f"herald pairing approve {driver.spec.name}" in message.text for message in in_dm] == pairing
    assert in_group == [] and emulator.requests == []


async def test_a_file_sent_out_arrives_whole(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    report = OutboundFile("report.csv", b"day,answers\nmonday,12\n" * 500, "text/csv")
    async with running(driver, home, emulator, emulator_url) as platform:
        adapter = platform.gateway.services.adapters[platform.name]
        place = driver.dm_place(driver.friend)
        driver.dm(driver.friend, "send me the report when it is ready")  # a bot writes to who wrote first
        await platform.settled()
        assert adapter.capabilities.max_file_bytes is not None
        assert len(report.data) <= adapter.capabilities.max_file_bytes
        await adapter.send_file(place.address(platform.name), report)
        files = driver.files(place)
    assert files == [("report.csv", report.data)]


@pytest.mark.slow
def test_a_message_stored_before_a_crash_is_answered_after_the_restart_once(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator
) -> None:
    """``herald gateway run`` killed (SIGKILL: no drain) while the message's turn waits for the model:
    only what was stored survives, and the next process answers it, once."""
    emulator.stall_next(30)
    emulator.script(Reply(text=ANSWER))
    with emulator.serve_in_thread() as provider, driver.serving_in_thread() as section:
        configure(home, provider, driver, section)
        place = driver.dm_place(driver.friend)
        with gateway_process(home, driver) as first:
            wait_until_sync(driver.receiving, PROCESS_TIMEOUT, what="the gateway receiving")
            driver.dm(driver.friend, "answer me after the crash")
            wait_until_sync(
                lambda: emulator.requests, PROCESS_TIMEOUT, what="the stored message's model request"
            )
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        assert driver.messages(place) == []
        with gateway_process(home, driver):
            wait_until_sync(
                lambda: driver.messages(place), PROCESS_TIMEOUT, what="the answer after the restart"
            )
            wait_until_sync(
                lambda: _all_answered(home), PROCESS_TIMEOUT, what="nothing pending in the database"
            )
            answers = driver.messages(place)
    assert [answer.text for answer in answers] == [ANSWER]
    assert len(emulator.requests) == 2  # the stalled one, then the restart's


def _all_answered(home: HeraldHome) -> bool:
    """The other process left nothing pending: every inbox row answered, every outbox item sent."""

    async def read() -> bool:
        async with open_home_storage(home) as storage:
            return bool(await storage.read(_nothing_pending))

    return asyncio.run(read())


def _nothing_pending(conn: sa.Connection) -> bool:
    def count(table: sa.Table) -> int:
        return int(conn.execute(sa.select(sa.func.count()).where(table.c.state == "pending")).scalar_one())

    return count(tables.inbox) == 0 and count(tables.outbox) == 0
