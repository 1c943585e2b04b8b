"""A cluster process's background loops survive what they did not expect: the exception is logged with
the loop's name and the loop goes on (``resilience.loops``). (A lease renewal that fails unexpectedly is
logged and the lease kept: ``tests/storage/test_renewal.py``.)"""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.home import HeraldHome
from resilience.backoff import Backoff
from resilience.loops import supervised
from tests.cluster_support import answer_each, open_cluster
from tests.emulator import ProviderEmulator
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(90)]

CHAT = 1000


async def until_logged(caplog: pytest.LogCaptureFixture, text: str) -> logging.LogRecord:
    async with asyncio.timeout(20):
        while True:
            for record in caplog.records:
                if text in record.getMessage():
                    return record
            await asyncio.sleep(0.02)


async def test_a_loop_that_raises_is_logged_and_started_again_and_one_that_returns_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds: list[int] = []

    async def loop() -> None:
        rounds.append(len(rounds))
        if len(rounds) < 3:
            raise RuntimeError(f"a bug, round {len(rounds)}")

    async with asyncio.timeout(5):
        await supervised("the test loop", loop, pauses=Backoff(0.01, 0.01))
    assert rounds == [0, 1, 2]  # ran again after each failure, and ended once it returned
    failures = [r for r in caplog.records if "the test loop failed unexpectedly" in r.getMessage()]
    assert len(failures) == 2 and all(r.levelno == logging.ERROR and r.exc_info for r in failures)
    assert "a bug, round 2" in caplog.text  # the traceback is in the log


async def test_the_work_queue_keeper_survives_a_bug_and_still_brings_the_queue_back_after_redis_returns(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator.responder = answer_each
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=1
    ) as cluster:
        queue = cluster.queue(0)
        trim = queue.stream.trim
        broken = True

        async def trim_once_broken() -> None:
            nonlocal broken
            if broken:
                broken = False
                raise RuntimeError("an error nobody foresaw")
            await trim()

        queue.stream.trim = trim_once_broken  # type: ignore[method-assign]
        record = await until_logged(caplog, "the work queue's keeper failed unexpectedly")
        assert record.exc_info is not None and "an error nobody foresaw" in caplog.text
        # Only the keeper reconnects: had it died, the queue would stay down after Redis returns.
        await asyncio.to_thread(redis_server.halt)
        async with asyncio.timeout(20):
            while queue.problem is None:  # noqa: ASYNC110 - the queue notices at its next command
                await asyncio.sleep(0.05)
        await asyncio.to_thread(redis_server.restart)
        async with asyncio.timeout(20):
            while queue.problem is not None:  # noqa: ASYNC110 - the keeper reconnects within a second
                await asyncio.sleep(0.05)
        cluster.fake.private_message(CHAT, "still there?")
        await cluster.settled(timeout=30)
        assert cluster.answers(CHAT) == ["Answer to still there?"]
