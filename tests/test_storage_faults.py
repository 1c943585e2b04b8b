"""PostgreSQL lost while the gateway runs: turns wait, nothing is confirmed that was not stored,
/readyz says so, and everything is answered once when the database is back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import FRIEND, telegram_gateway
from tests.postgres import PostgresServer, free_port

pytestmark = [pytest.mark.sqlite_only, pytest.mark.timeout(120)]  # a PostgreSQL of its own


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
        await fake.wait_for(lambda: emulator.in_flight > 0, 10.0, what="the first turn streaming")
        server.halt()
        fake.private_message(FRIEND, "second question, sent while the database is down")
        await asyncio.sleep(1.5)
        assert len(fake.pending_updates()) >= 1  # not confirmed: it was not stored
        readiness = await harness.gateway.http.readiness()
        problems = readiness["problems"]
        assert readiness["ready"] is False and isinstance(problems, list)
        assert any("database" in problem for problem in problems)
        server.resume()
        await harness.settled(timeout=60)
        answers = harness.texts(FRIEND)
        readiness = await harness.gateway.http.readiness()
    assert readiness["ready"] is True
    assert len(answers) == 2, answers  # one answer per question, no duplicate, no leftover
    assert answers[0].startswith("The first answer") and answers[1] == "Second answer."


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
