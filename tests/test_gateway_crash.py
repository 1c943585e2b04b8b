"""`herald gateway run` killed and restarted: every message ends with exactly one answer.

These tests start real processes because the process boundary is the point: SIGKILL leaves no chance
to clean up, so only what was written to state.db (inbox, session, outbox) survives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gateway.config import set_value
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram

pytestmark = pytest.mark.timeout(120)

CHAT = 2


def configure(home: HeraldHome, provider_url: str, telegram_url: str) -> None:
    for key, value in (
        ("model.base_url", provider_url),
        ("model.retry_base_delay", "0.01"),
        ("telegram.base_url", telegram_url),
        ("telegram.allowed_users", f"[{CHAT}]"),
        ("gateway.http_port", "0"),
        ("gateway.stream_edit_interval", "0.2"),
        ("gateway.drain_timeout", "2"),
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


def settle(fake: FakeTelegram, expected: int) -> list[str]:
    """Wait for ``expected`` final answers (no update left unconfirmed) and a quiet second after."""

    def complete() -> bool:
        current = answers(fake)
        return (
            not fake.pending_updates()
            and len(current) >= expected
            and all(a.endswith("END") for a in current)
        )

    fake.wait_for_sync(complete, timeout=60, what=f"{expected} complete answers")
    time.sleep(1.0)  # nothing more may arrive: a doubled answer would show up now
    return answers(fake)


def test_sigkill_mid_turn_then_restart_answers_every_message_exactly_once(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    emulator.stream_delay = 0.05  # each answer streams for about a second
    emulator.responder = answer_each
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        with gateway_process(home, fake) as first:
            for n in range(3):
                fake.private_message(CHAT, f"question {n}")
            fake.wait_for_sync(lambda: emulator.requests, timeout=30, what="the first model request")
            time.sleep(0.3)  # mid-stream
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with gateway_process(home, fake):
            final = settle(fake, 3)
    assert len(final) == 3, final
    for n, text in enumerate(final):
        assert text.startswith(f"Answer to question {n}:")  # each question has its own answer, in order
    last = emulator.requests[-1].json["messages"]
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
            fake.wait_for_sync(lambda: emulator.requests, timeout=30, what="the stalled model request")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with gateway_process(home, fake):
            final = settle(fake, 1)
    assert len(final) == 1 and final[0].startswith("Answer to question 0:")


def test_a_reply_queued_before_the_crash_is_sent_once_after_the_restart(
    emulator: ProviderEmulator, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    emulator.script(Reply(text="The answer you waited for."))
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        set_value(home.config_path, "gateway.stream_edit_interval", "0")
        with gateway_process(home, fake) as first:
            fake.fail_next("sendMessage", 429, retry_after=20)  # the adapter waits it out: kill it then
            fake.private_message(CHAT, "question")
            fake.wait_for_sync(lambda: fake.calls_to("sendMessage"), timeout=30, what="a send attempt")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        with gateway_process(home, fake):
            fake.wait_for_sync(lambda: answers(fake), timeout=30, what="the queued reply")
            time.sleep(1.0)
            final = answers(fake)
    assert final == ["The answer you waited for."]
    assert len(emulator.requests) == 1  # answered once, not asked again


def test_sigterm_drains_and_exits_zero(emulator: ProviderEmulator, home: HeraldHome) -> None:
    fake = FakeTelegram()
    emulator.stream_delay = 0.02
    emulator.responder = answer_each
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        with gateway_process(home, fake) as process:
            fake.private_message(CHAT, "answer me before you go")
            fake.wait_for_sync(lambda: emulator.requests, timeout=30, what="the model request")
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
            stderr = process.stderr.read() if process.stderr else ""
        final = answers(fake)
    assert code == 0, stderr
    assert final == [final[0]] and final[0].startswith("Answer to answer me before you go:")
    assert final[0].endswith("END")
