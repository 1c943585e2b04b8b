"""Three ``herald gateway run`` processes of one cluster share one bot-wide daily limit.

Real processes, because the process boundary is the point: each process admits requests against the
figures in Redis, so together they stop at the limit and never pass it: each request is reserved at
what it can cost, its ``max_tokens`` lowered to what is left after those in flight in every process.
Many requests are in flight at once when the limit is reached (the emulator answers slowly): processes
that kept their own counts would each let through their share of them.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from gateway.config import set_value
from gateway.home import HeraldHome
from tests.cluster.test_cluster_chaos import START_TIMEOUT, USERS, Process, configure, gateway_process, wait
from tests.conftest import postgres_server
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.postgres import free_port
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(240)]  # PostgreSQL whatever --storage says

LIMIT = 0.1  # about 30 of the 80 messages' answers
LINE = "This bot has used its $0.10 for today; it resets at 00:00 Europe/Berlin."


def role(process: Process) -> str | None:
    """The process's role in the cluster, once its /readyz says (None before)."""
    found = (process.report() or {}).get("cluster", {}).get("role")
    return None if found is None else str(found)


def scalar(database_url: str, statement: str) -> float:
    found = postgres_server().sql(database_url.rsplit("/", 1)[1], statement)
    return float(found or 0)


def test_three_processes_together_stay_within_a_shared_limit(
    emulator: ProviderEmulator, home: HeraldHome, postgresql_database: str, redis_server: RedisServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    fake = FakeTelegram()
    emulator.stream_delay = 0.1  # about a second an answer: many are in flight when the limit is reached
    emulator.responder = lambda body, api: Reply(text="An answer. " * 10)
    with ExitStack() as stack:
        provider = stack.enter_context(emulator.serve_in_thread())
        telegram = stack.enter_context(fake.serve_in_thread())
        configure(home, provider, telegram, postgresql_database, redis_server.url)
        for key, value in (
            ("budgets.bot.daily_usd", str(LIMIT)),
            ("scheduler.timezone", "Europe/Berlin"),
            # Below this model's smallest cacheable prompt (4,096 tokens): nothing is cached, so a request's
            # estimate is close to its cost, and the limit is reached with many requests still fitting it.
            ("model.name", "claude-haiku-4-5"),
            ("model.max_tokens", "40"),
        ):
            set_value(home.config_path, key, value)
        processes = [
            stack.enter_context(gateway_process(home, fake, name, free_port(), tmp_path)) for name in "abc"
        ]
        wait(lambda: [role(p) for p in processes].count("leader") == 1, START_TIMEOUT, "three up, a leader")
        for round_ in ("first", "second"):
            for user in USERS:
                fake.private_message(user, f"{round_} question from {user}")

        def handled() -> bool:
            return not fake.pending_updates() and scalar(
                postgresql_database, "SELECT count(*) FROM inbox WHERE state = 'pending'"
            ) == 0 and scalar(postgresql_database, "SELECT count(*) FROM inbox") == 2 * len(USERS)

        wait(handled, 90, "every message answered or refused")
        fake.wait_for_sync(lambda: all(fake.messages(user) for user in USERS), 30, what="every chat told")
        answered_by = [p.metric('gateway_turns_total{outcome="answered"}') or 0.0 for p in processes]
        total = scalar(postgresql_database, "SELECT sum(estimated_cost) FROM requests")
        window = scalar(
            postgresql_database, "SELECT spent FROM spend_windows WHERE scope = 'bot' AND period LIKE 'day:%'"
        )
        answered = scalar(postgresql_database, "SELECT count(*) FROM inbox WHERE state = 'answered'")
        refused = scalar(postgresql_database, "SELECT count(*) FROM inbox WHERE state = 'refused'")
        told = [[m.text for m in fake.messages(user) if m.text.startswith("This bot has")] for user in USERS]
    assert total == pytest.approx(window)  # the window is the sum of what the requests cost
    assert total <= LIMIT  # not one request beyond the limit, whichever process sent it
    assert total > 0.9 * LIMIT  # and it was really reached, not stopped early (reservations are a bit above
    # what the requests then cost: the input is reserved with a margin, see agent.spending.estimate)
    assert len(emulator.requests) == answered  # a refused message reached no model
    assert refused > 0 and answered + refused == 2 * len(USERS)
    assert 0 < sum(map(len, told)) <= refused  # each line tells one refused message what happened
    assert all(lines.count(LINE) <= 1 for lines in told)  # "used up": once per chat, whatever it sent after
    for line in (line for lines in told for line in lines if line != LINE):
        assert "of its $0.10 for today" in line and ("needs at least" in line or "still running" in line)
    assert sum(1 for turns in answered_by if turns > 0) >= 2, answered_by  # the processes shared the work
