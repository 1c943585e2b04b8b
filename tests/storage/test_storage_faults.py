"""PostgreSQL lost while the gateway runs: turns wait, nothing is confirmed that was not stored,
/readyz says so, and everything is answered once when the database is back."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from agent.memory import OWNER_SCOPE
from gateway.cron.jobs import NewJob, RunStatus, parse_target
from gateway.home import HeraldHome
from gateway.intake.outage import MAX_WAIT
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.fakes.waiting import WAIT_TIMEOUT
from tests.gateway_support import FRIEND, Harness, telegram_gateway
from tests.postgres import PostgresServer, free_port

pytestmark = [pytest.mark.own_database, pytest.mark.slow]  # a PostgreSQL of its own, halted and resumed
AFTER_OUTAGE = MAX_WAIT + WAIT_TIMEOUT  # the gateway's next try may be MAX_WAIT away, then the work


async def test_postgresql_stopped_mid_turn_and_started_again_loses_nothing_and_answers_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, own_postgres: PostgresServer
) -> None:
    server = own_postgres
    url = server.new_database()
    emulator.stream_delay = 0.02

    def model(body: dict[str, Any], api: str) -> Reply:  # answers by question: a rerun gets the same
        if "first question" in json.dumps(body["messages"][-1]):
            return Reply(text="The first answer, " + "streamed slowly. " * 40)
        return Reply(text="Second answer.")

    emulator.responder = model
    async with telegram_gateway(home, emulator, emulator_url, storage={"url": url}) as harness:
        fake = harness.fake
        fake.private_message(FRIEND, "first question")
        await fake.wait_for(lambda: emulator.in_flight > 0, what="the first turn streaming")
        server.halt()
        fake.private_message(FRIEND, "second question, sent while the database is down")
        adapter = harness.gateway.adapters[0]
        await fake.wait_for(lambda: "not stored yet" in adapter.status().detail, what="a failed store")
        assert len(fake.pending_updates()) >= 1  # not confirmed: it was not stored
        readiness = await harness.gateway.http.readiness()
        problems = readiness["problems"]
        assert readiness["ready"] is False and isinstance(problems, list)
        assert any("database" in problem for problem in problems)
        server.resume()
        await harness.settled(AFTER_OUTAGE)
        answers = harness.texts(FRIEND)
        readiness = await harness.gateway.http.readiness()
    assert readiness["ready"] is True
    assert len(answers) == 2, answers  # one answer per question, no duplicate, no leftover
    assert answers[0].startswith("The first answer") and answers[1] == "Second answer."


SLOW_DIGEST = "The digest, " + "streamed slowly. " * 40


async def _halt_during_a_run(
    harness: Harness, emulator: ProviderEmulator, server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> tuple[str, asyncio.Task[RunStatus | None]]:
    """A job's run started, PostgreSQL halted while its model request streams, the run waiting for it;
    returns the job's id and the run."""
    cron = harness.gateway.services.runtime.cron
    job = await cron.jobs.add(
        NewJob("Digest", "write the digest", "every 1h", parse_target(f"telegram:{FRIEND}"), "cli:local",
               OWNER_SCOPE, None, time.time() + 3600)
    )  # fmt: skip
    emulator.hold_streams()
    running = asyncio.create_task(harness.gateway.scheduler.run_now(job.id))
    await harness.fake.wait_for(lambda: emulator.holding, what="the run's answer half-way")
    server.halt()
    emulator.release_streams()  # the answer arrives with nowhere to be stored
    await harness.fake.wait_for(lambda: f"cron job {job.id} waits" in caplog.text, what="the wait")
    assert not running.done()
    return job.id, running


def _chat_with_the_bot() -> FakeTelegram:
    fake = FakeTelegram()
    fake.register_chat(FRIEND)  # a job posts into a chat the bot is in
    return fake


async def test_a_scheduled_run_waits_for_postgresql_and_finishes_once_it_is_back(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    own_postgres: PostgresServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run claimed its occurrence (its next time moved on): failing it would lose the occurrence."""
    emulator.responder = lambda body, api: Reply(text=SLOW_DIGEST)
    database = {"url": own_postgres.new_database()}
    fake = _chat_with_the_bot()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, storage=database) as harness:
        job_id, running = await _halt_during_a_run(harness, emulator, own_postgres, caplog)
        own_postgres.resume()
        status = await asyncio.wait_for(running, AFTER_OUTAGE)
        await harness.settled(AFTER_OUTAGE)
        after = await harness.gateway.services.runtime.cron.jobs.get(job_id)
    assert status is RunStatus.OK and after is not None and after.last_status is RunStatus.OK
    assert harness.texts(FRIEND) == [SLOW_DIGEST.strip()]  # posted once
    roles = [m["role"] for m in emulator.requests[-1].json["messages"]]
    assert roles == ["user"]  # the cut-off try was closed: the run again sends one prompt, not two
    assert "failed unexpectedly" not in caplog.text


async def test_a_scheduled_run_waiting_for_postgresql_when_the_gateway_stops_is_recorded_interrupted(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    own_postgres: PostgresServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator.responder = lambda body, api: Reply(text=SLOW_DIGEST)
    database = {"url": own_postgres.new_database()}
    fake = _chat_with_the_bot()
    quick = {"drain_timeout": 0.1}
    async with telegram_gateway(
        home, emulator, emulator_url, fake=fake, storage=database, gateway=quick
    ) as harness:
        job_id, running = await _halt_during_a_run(harness, emulator, own_postgres, caplog)
    assert running.cancelled()  # the gateway stopped cleanly, the database still away
    own_postgres.resume()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, storage=database) as harness:
        after = await harness.gateway.services.runtime.cron.jobs.get(job_id)
    assert after is not None and after.last_status is RunStatus.INTERRUPTED
    assert harness.texts(FRIEND) == []


def test_a_database_refusing_connections_at_start_up_is_one_sentence_and_exit_2(
    home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:never-used")  # the database is opened first
    home.config_path.write_text(
        f"storage:\n  url: postgresql://herald:hunter2@127.0.0.1:{free_port()}/herald\n"
    )
    for command in (["chat", "-q", "hello"], ["gateway", "run"], ["cron", "list"], ["insights"]):
        result = herald(*command)
        assert result.returncode == 2, (command, result)
        [line] = result.stderr.strip().splitlines()
        assert (
            line.startswith("herald: the database postgresql://herald:***@127.0.0.1:")
            and "cannot be reached" in line
        )
        assert "hunter2" not in result.stderr + result.stdout
