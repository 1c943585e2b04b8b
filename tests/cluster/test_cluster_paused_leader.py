"""A leader SIGSTOPped past its lease while its ``getUpdates`` fail, then SIGCONTed: it steps down to a
worker, and its ``/readyz`` says ready, since a worker's readiness does not hang on a poller it no longer
runs (the bug kept "telegram: not connected: TimedOut" on such a worker for good; how a poll fails makes
no difference to it, so the polls here fail at once, their connection dropped, instead of timing out
after ``getUpdates``' read timeout).

Real processes because the pause is the point: the whole process stands still, its lease lapses in
Redis and another process polls; woken, it finds its term over and goes on as a worker.
"""

from __future__ import annotations

import signal
from contextlib import ExitStack
from pathlib import Path

import pytest

from gateway.config import set_value
from gateway.home import HeraldHome
from tests.cluster.test_cluster_chaos import (
    START_TIMEOUT,
    USERS,
    Process,
    answer_each,
    configure,
    gateway_process,
    wait,
)
from tests.emulator import ProviderEmulator
from tests.fakes import FakeTelegram
from tests.postgres import free_port
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(240)]

LONG_POLL = 3  # ``telegram.long_poll``, shortened from 30 s: the poll under way ends soon
LEADER_TTL = 10.0  # longer than the default 3 s: a loaded machine does not make the leader step down first
STATE_WITHIN = 60.0  # bounds on waiting for a state, not speeds (the bug kept /readyz at 503 for minutes)


def telegram_problems(process: Process) -> list[str] | None:
    """What ``/readyz`` says is wrong with Telegram (None while the process does not answer)."""
    report = process.report()
    if report is None:
        return None
    return [p for p in report["problems"] if p.startswith("telegram")]


def ready(process: Process) -> bool:
    report = process.report()
    return report is not None and report["ready"] is True


def test_a_leader_paused_past_its_lease_while_its_polls_fail_is_a_ready_worker_once_resumed(
    emulator: ProviderEmulator, home: HeraldHome, postgresql_database: str, redis_server: RedisServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    fake = FakeTelegram()
    emulator.responder = answer_each
    with ExitStack() as stack:
        provider = stack.enter_context(emulator.serve_in_thread())
        telegram = stack.enter_context(fake.serve_in_thread())
        configure(home, provider, telegram, postgresql_database, redis_server.url)
        set_value(home.config_path, "cluster.leader_ttl", str(LEADER_TTL))
        set_value(home.config_path, "telegram.long_poll", str(LONG_POLL))
        processes = [
            stack.enter_context(gateway_process(home, fake, name, free_port(), tmp_path)) for name in "ab"
        ]
        wait(lambda: all(p.role() is not None for p in processes), START_TIMEOUT, "two processes up")
        wait(lambda: [p.role() for p in processes].count("leader") == 1, STATE_WITHIN, "a leader")
        [leader] = [p for p in processes if p.role() == "leader"]
        [other] = [p for p in processes if p is not leader]
        wait(lambda: ready(leader), START_TIMEOUT, "the leader ready")

        fake.fail_network_next("getUpdates", count=100_000)  # from the next poll on: none is answered
        fake.private_message(USERS[0], "ends the poll under way")
        wait(
            lambda: any("not connected" in p for p in telegram_problems(leader) or []),
            STATE_WITHIN,
            "the leader's polls failing",
        )
        leader.popen.send_signal(signal.SIGSTOP)
        with fake.lock:  # the next leader's polls are answered
            fake.network_faults.pop("getUpdates", None)
        wait(lambda: other.role() == "leader", STATE_WITHIN, "the other process leading")
        leader.popen.send_signal(signal.SIGCONT)

        wait(lambda: leader.role() == "worker", STATE_WITHIN, "the woken leader stepping down")
        try:
            wait(lambda: ready(leader), STATE_WITHIN, "the worker ready")
        except AssertionError as error:
            raise AssertionError(f"{error}; /readyz: {leader.report()}") from None
        fake.wait_for_sync(lambda: fake.messages(USERS[0]), STATE_WITHIN, what="the message answered")
        assert telegram_problems(leader) == []
    assert {str(call.params.get("timeout")) for call in fake.calls_to("getUpdates")} == {str(LONG_POLL)}
    assert fake.poll_overlaps == [], "two getUpdates callers at once"
