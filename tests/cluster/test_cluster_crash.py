"""A cluster worker SIGKILLed, or SIGSTOPped past its lease, in the middle of a turn: another process
finishes the message, once.

Real processes, because the process boundary is the point: the killed worker leaves its stream entry
unacknowledged and its half-done turn in PostgreSQL, and nothing of it runs again; the stopped one
wakes up believing it still holds the session, and neither its writes nor its streamed edits land.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from gateway.home import HeraldHome, ensure_home
from gateway.ledger.inbox import Inbox
from gateway.ledger.outbox import Outbox
from tests.cluster_support import LEASE_TTL, answer_each
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.postgres import free_port
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(150)]

CHAT = 2
STREAM = "herald:work"


def cluster_homes(
    root: Path,
    *,
    provider: str,
    telegram: str,
    database: str,
    redis_url: str,
    port: int,
    stream_edit_interval: float = 0.2,
) -> list[HeraldHome]:
    """The homes of two workers ``w0`` and ``w1``; ``w0`` receives Telegram's webhook on ``port``."""
    homes = [HeraldHome(root / f"home{index}") for index in range(2)]
    for index, home in enumerate(homes):
        ensure_home(home)
        home.config_path.write_text(
            f"""model:
  base_url: {provider}
  retry_base_delay: 0.01
storage:
  url: {database}
telegram:
  base_url: {telegram}
  allowed_users: [{CHAT}]
  mode: webhook
  webhook_url: http://127.0.0.1:{port}/telegram/webhook
gateway:
  http_port: {port if index == 0 else 0}
  stream_edit_interval: {stream_edit_interval}
  drain_timeout: 2
cluster:
  redis_url: {redis_url}
  instance_id: w{index}
  lease_ttl: {LEASE_TTL}
"""
        )
    return homes


@contextmanager
def gateway_process(home: HeraldHome, token: str) -> Iterator[subprocess.Popen[str]]:
    """``herald gateway run`` on ``home``; its log in ``home``/gateway.log; killed on exit."""
    env = {**os.environ, "HERALD_HOME": str(home.root), "TELEGRAM_BOT_TOKEN": token, "ANTHROPIC_API_KEY": "k"}
    with (home.root / "gateway.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "gateway", "run"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a stopped process cannot die until it runs
            process.kill()
        process.wait(timeout=10)


def both_reading(client: redis.Redis) -> bool:
    try:
        names = {c["name"] for c in client.xinfo_consumers(STREAM, "workers")}
    except redis.ResponseError:
        return False
    return names >= {"w0", "w1"}


def worker_of_the_entry(client: redis.Redis) -> int:
    """The index of the process that read the one unacknowledged entry."""
    [held] = client.xpending_range(STREAM, "workers", "-", "+", 10)
    return int(str(held["consumer"])[1:])


def nothing_pending(client: redis.Redis, database: str, root: Path) -> bool:
    """No stream entry unacknowledged, no stored message unanswered and no reply unsent."""
    if client.xpending(STREAM, "workers")["pending"]:
        return False

    async def stored() -> bool:
        async with open_storage(parse_storage_url(database, root / "unused.db")) as storage:
            return not await Inbox(storage).pending() and await Outbox(storage).pending_count() == 0

    return asyncio.run(stored())


def wait(predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_killed_mid_turn_is_replaced_by_another_process_and_the_message_answered_once(
    tmp_path: Path,
    emulator: ProviderEmulator,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    fake = FakeTelegram()
    emulator.responder = answer_each
    emulator.stall_next(60)  # the first attempt hangs: its worker is killed while it waits
    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=5)
    port = free_port()
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram, ExitStack() as stack:
        homes = cluster_homes(
            tmp_path,
            provider=provider,
            telegram=telegram,
            database=postgresql_database,
            redis_url=redis_server.url,
            port=port,
        )
        processes = [stack.enter_context(gateway_process(home, fake.token)) for home in homes]

        wait(lambda: both_reading(client), "both workers reading the stream", timeout=60)
        fake.private_message(CHAT, "question")
        wait(lambda: emulator.requests, "the first model request")
        killed = worker_of_the_entry(client)
        processes[killed].send_signal(signal.SIGKILL)
        processes[killed].wait(timeout=10)

        def answered() -> list[str]:
            return [m.text for m in fake.messages(CHAT) if not m.deleted and m.text.startswith("Answer")]

        wait(answered, "the answer from the other process", timeout=60)
        # Nothing left to do anywhere: no entry unacknowledged, no message unanswered, no reply unsent.
        # A doubled answer needs one of them (a later message would not do: if w0 was killed, nobody
        # receives the webhook any more).
        wait(lambda: nothing_pending(client, postgresql_database, tmp_path), "the cluster settled")
        final = [m.text for m in fake.messages(CHAT) if not m.deleted]
        assert processes[1 - killed].poll() is None
    client.close()
    assert final == ["Answer to question"]
    assert len(emulator.requests) == 2  # the killed attempt and the one that answered
    # Taken over because its entry went idle a whole lease in Redis (claimed once), not by a stopwatch.
    claimed = (homes[1 - killed].root / "gateway.log").read_bytes()
    assert claimed.count(b"claimed entry") == 1 and b"of a process that stopped" in claimed


GIVEN_UP = (b"abandoned", b"was taken over by another process")  # the fenced write, or the renewal


def slow_answer_text(question: str) -> str:
    return f"Answer to {question}:" + " more" * 40 + " END"


def slow_answer(body: dict[str, Any], api: str) -> Reply:
    """To "question": an answer that streams for several seconds (with ``stream_delay``), ending in END;
    to anything else a short one."""
    question = body["messages"][-1]["content"][0]["text"]
    return Reply(text=slow_answer_text(question) if question == "question" else f"Answer to {question}")


def test_a_worker_paused_past_its_lease_wakes_up_and_neither_writes_nor_streams_anything(
    tmp_path: Path,
    emulator: ProviderEmulator,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    fake = FakeTelegram()
    emulator.responder = slow_answer
    emulator.stream_delay = 0.1  # about 4 s per answer: the first worker is stopped mid-stream
    client = redis.Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=5)
    port = free_port()
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram, ExitStack() as stack:
        homes = cluster_homes(
            tmp_path,
            provider=provider,
            telegram=telegram,
            database=postgresql_database,
            redis_url=redis_server.url,
            port=port,
            stream_edit_interval=0.3,
        )
        processes = [stack.enter_context(gateway_process(home, fake.token)) for home in homes]
        wait(lambda: both_reading(client), "both workers reading the stream", timeout=60)

        def shown() -> list[str]:
            return [m.text for m in fake.messages(CHAT) if not m.deleted]

        fake.private_message(CHAT, "question")
        wait(lambda: any(text.startswith("Answer") for text in shown()), "the answer streaming")
        stopped = worker_of_the_entry(client)
        processes[stopped].send_signal(signal.SIGSTOP)
        wait(lambda: any(text.endswith("END") for text in shown()), "the other process's answer", timeout=60)
        before = fake.messages(CHAT)
        processes[stopped].send_signal(signal.SIGCONT)
        # The woken worker's stream has the rest of its answer to show, its lease renewal is overdue
        # and its turn wants to store the answer: none of it may reach the chat or the history.
        log = homes[stopped].root / "gateway.log"
        wait(lambda: any(line in log.read_bytes() for line in GIVEN_UP), "the late turn given up")
        assert processes[stopped].poll() is None  # alive and well: it only lost the session
        fake.private_message(CHAT, "second")  # answered after anything the late worker still did
        wait(lambda: any(text.startswith("Answer to second") for text in shown()), "the next answer", 60)
        # The renewal's line may come before the late turn has ended: a half-streamed message of its own
        # that it could not record is taken back as that turn ends, which a loaded machine may delay.
        wait(
            lambda: [text for text in shown() if text.startswith("Answer to question")]
            == [slow_answer_text("question")],
            "the late worker's half-streamed message taken back",
            timeout=60,
        )
        after = [m for m in fake.messages(CHAT) if not m.text.startswith("Answer to second")]
    client.close()
    # Not one send or edit from the late worker; it may only take back a half-streamed message of its
    # own that it sent just before it was stopped (the new holder never learnt of it).
    earlier = {m.message_id: m for m in before}
    assert all(m.message_id in earlier for m in after), "the late worker sent a message"
    assert all(m.versions == earlier[m.message_id].versions for m in after), "the late worker edited"
    taken_back = [m for m in after if m.deleted and not earlier[m.message_id].deleted]
    assert all(m.text != slow_answer_text("question") for m in taken_back)
    assert [text for text in shown() if text.startswith("Answer to question")] == [
        slow_answer_text("question")
    ]
    history = emulator.requests[-1].json["messages"]
    assistant = [m for m in history if m["role"] == "assistant"]
    assert len(assistant) == 1  # the history holds the question's answer once
