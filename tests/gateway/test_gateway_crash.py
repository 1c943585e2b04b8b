"""`herald gateway run` killed and restarted: every message ends with exactly one answer.

These tests start real processes because the process boundary is the point: SIGKILL leaves no chance
to clean up, so only what was written to state.db (inbox, session, outbox) survives.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gateway.config import set_value
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.ledger.inbox import Inbox
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.fakes.waiting import PROCESS_TIMEOUT

# Processes restart. The SIGKILL mid-turn runs on each database (what a killed process leaves in it);
# the other scenarios differ in the gateway, not in the storage, and run on the one their name picks.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHAT = 2


def configure(home: HeraldHome, provider_url: str, telegram_url: str) -> None:
    for key, value in (
        ("model.base_url", provider_url),
        ("model.retry_base_delay", "0.01"),
        ("telegram.base_url", telegram_url),
        ("telegram.allowed_users", f"[{CHAT}]"),
        ("gateway.http_port", "0"),
        ("gateway.stream_edit_interval", "0.2"),
        ("gateway.drain_timeout", "60"),  # a SIGTERM lets the turn finish, however slow the machine
    ):
        set_value(home.config_path, key, value)


@contextmanager
def gateway_process(home: HeraldHome, fake: FakeTelegram) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "HERALD_HOME": str(home.root), "TELEGRAM_BOT_TOKEN": fake.token}
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "gateway", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def answer_each(body: dict[str, Any], api: str) -> Reply:
    """A recognisable answer per question, long enough to stream for a while, ending in END."""
    question = body["messages"][-1]["content"][0]["text"]
    return Reply(text=f"Answer to {question}: " + "more words " * 60 + "END")


def answers(fake: FakeTelegram) -> list[str]:
    return [m.text for m in fake.messages(CHAT) if not m.deleted]


def streamed_into(home: HeraldHome) -> bool:
    """Whether the gateway recorded a message an answer streams into (a restart reuses it; a kill
    between sending it and recording it would leave it behind, as nothing knows it)."""

    async def read() -> bool:
        async with open_home_storage(home, read_only=True) as storage:
            return any(row.stream_message_id for row in await Inbox(storage).pending())

    return asyncio.run(read())


def settle(fake: FakeTelegram) -> list[str]:
    """The chat's final answers once everything before a last question is answered: that question is
    answered after whatever the restart still had to do for the chat (its turns run in order, its
    replies go out in order), so a doubled answer would be in the chat by then. Without the last one."""
    fake.private_message(CHAT, "the last question")

    def complete() -> list[str] | None:
        current = answers(fake)
        last = current[-1] if current else ""
        done = last.startswith("Answer to the last question") and last.endswith("END")
        return current[:-1] if done and not fake.pending_updates() else None

    final = fake.wait_for_sync(complete, PROCESS_TIMEOUT, what="the last question answered")
    assert final is not None
    return final


@pytest.mark.each_database
def test_sigkill_mid_turn_then_restart_answers_every_message_exactly_once(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    emulator.responder = answer_each
    emulator.hold_streams()  # the first answer stops half-way: the kill comes mid-stream
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        with gateway_process(home, fake) as first:
            for n in range(3):
                fake.private_message(CHAT, f"question {n}")
            half = "half an answer in the chat, its message recorded"
            fake.wait_for_sync(lambda: emulator.holding and streamed_into(home), PROCESS_TIMEOUT, what=half)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with gateway_process(home, fake):
            final = settle(fake)
    assert len(final) == 3, final
    for n, text in enumerate(final):
        assert text.startswith(f"Answer to question {n}:")  # each question has its own answer, in order
    last = emulator.requests[-2].json["messages"]  # the third question's
    assert [m["role"] for m in last] == ["user", "assistant"] * 2 + ["user"]


def test_sigkill_while_waiting_for_the_model_then_restart_answers_once(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    emulator.responder = answer_each
    emulator.stall_next(30)  # the first request hangs: the message is stored, nothing is answered yet
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        with gateway_process(home, fake) as first:
            fake.private_message(CHAT, "question 0")
            fake.wait_for_sync(lambda: emulator.requests, PROCESS_TIMEOUT, what="the stalled model request")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with gateway_process(home, fake):
            final = settle(fake)
    assert len(final) == 1 and final[0].startswith("Answer to question 0:"), final


def test_a_reply_queued_before_the_crash_is_sent_once_after_the_restart(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    emulator.script(Reply(text="The answer you waited for. END"))
    emulator.responder = answer_each
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        set_value(home.config_path, "gateway.stream_edit_interval", "0")
        with gateway_process(home, fake) as first:
            fake.fail_next("sendMessage", 429, retry_after=20)  # the adapter waits it out: kill it then
            fake.private_message(CHAT, "question")
            fake.wait_for_sync(lambda: fake.calls_to("sendMessage"), PROCESS_TIMEOUT, what="a send attempt")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with gateway_process(home, fake):
            final = settle(fake)
    assert final == ["The answer you waited for. END"]
    assert len(emulator.requests) == 2  # answered once, not asked again (and the last question)


def test_sigterm_drains_and_exits_zero(emulator: ProviderEmulator, home: HeraldHome) -> None:
    fake = FakeTelegram()
    emulator.stream_delay = 0.02
    emulator.responder = answer_each
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        with gateway_process(home, fake) as process:
            fake.private_message(CHAT, "answer me before you go")
            fake.wait_for_sync(lambda: emulator.requests, PROCESS_TIMEOUT, what="the model request")
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=PROCESS_TIMEOUT)
            stderr = process.stderr.read() if process.stderr else ""
        final = answers(fake)
    assert code == 0, stderr
    assert final == [final[0]] and final[0].startswith("Answer to answer me before you go:")
    assert final[0].endswith("END")
