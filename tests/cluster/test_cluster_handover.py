"""A rolling restart's step: ``herald gateway run`` stopped by SIGTERM hands the leader lease over at
once and drains, with real processes on PostgreSQL and Redis.

The lease's TTL is set far beyond the test's waits (300 s: a waiting process tries again every 100 s),
so the next process polling within them is the hand-over itself: the stopping leader releases the
lease and announces it, and the waiting process takes it when it hears so. Meanwhile messages keep
arriving: each is answered once, and never are there two pollers.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from gateway.config import set_value
from gateway.home import HeraldHome
from tests.cluster.test_cluster_chaos import (
    LATER,
    START_TIMEOUT,
    USERS,
    answer_each,
    answered_later,
    configure,
    gateway_process,
    wait,
)
from tests.emulator import ProviderEmulator
from tests.fakes import FakeTelegram
from tests.postgres import free_port
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(240), pytest.mark.slow]

LEADER_TTL = 300.0  # the hand-over must not wait for it, nor for the next try (every 100 s)
HANDOVER_TIMEOUT = 60.0  # a bound on waiting for the new leader: a loaded machine, well below 100 s


def test_a_leader_stopped_by_sigterm_hands_over_at_once_drains_and_exits_0(
    emulator: ProviderEmulator, home: HeraldHome, postgresql_database: str, redis_server: RedisServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    fake = FakeTelegram()
    emulator.responder = answer_each
    emulator.stream_delay = 0.02  # turns are under way when the leader is stopped
    users = USERS[:30]
    with ExitStack() as stack:
        provider = stack.enter_context(emulator.serve_in_thread())
        telegram = stack.enter_context(fake.serve_in_thread())
        configure(home, provider, telegram, postgresql_database, redis_server.url)
        set_value(home.config_path, "cluster.leader_ttl", str(LEADER_TTL))
        set_value(home.config_path, "gateway.drain_timeout", "30")
        processes = [
            stack.enter_context(gateway_process(home, fake, name, free_port(), tmp_path)) for name in "ab"
        ]
        wait(lambda: [p.role() for p in processes].count("leader") == 1, START_TIMEOUT, "two up, a leader")
        wait(lambda: [p.role() for p in processes].count("worker") == 1, START_TIMEOUT, "a worker")
        [leader] = [p for p in processes if p.role() == "leader"]
        [other] = [p for p in processes if p is not leader]

        def send() -> None:
            for user in users:
                fake.private_message(user, f"question from {user}")
                time.sleep(0.1)

        sender = threading.Thread(target=send, name="updates")
        sender.start()
        fake.wait_for_sync(lambda: len(fake.messages(users[0])) == 1, 30, what="the leader answering")
        leader.popen.send_signal(signal.SIGTERM)
        wait(lambda: other.role() == "leader", HANDOVER_TIMEOUT, "the other process leading")
        assert leader.popen.wait(timeout=60) == 0  # drained and stopped on its own
        sender.join(timeout=30)
        fake.wait_for_sync(lambda: not fake.pending_updates(), 30, what="every update confirmed (stored)")
        fake.wait_for_sync(lambda: all(fake.messages(u) for u in users), 60, what="every message answered")
        answered_later(fake, users)
        counts = {user: [m.text for m in fake.messages(user)] for user in users}
        log = (tmp_path / f"{leader.name}.log").read_text()
    first = "Answer to question from {}:" + " more" * 20 + " END"
    expected = {u: [first.format(u), f"Answer to {LATER}"] for u in users}
    assert {u: t for u, t in counts.items() if t != expected[u]} == {}
    assert fake.poll_overlaps == [], "two getUpdates callers at once"
    assert [c for c in fake.calls_to("getUpdates") if c.status == 409] == []
    assert "Traceback" not in log
