"""A gateway in a cluster (``cluster.redis_url``): its Redis at start-up, in /readyz and /metrics, in
``herald doctor``, and a turn whose session another process took over (nothing queued, nothing sent).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from agent.db.fencing import issue_token
from agent.db.schema import messages, session_fences
from gateway.config import CLUSTER_NEEDS_POSTGRESQL
from gateway.home import HeraldHome
from gateway.ledger.inbox import InboxState
from tests.emulator import ProviderEmulator, Reply
from tests.gateway_support import FRIEND, telegram_gateway
from tests.helpers import Ran
from tests.postgres import free_port
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(90)]  # PostgreSQL whatever --storage says

PASSWORD = "s3cret-sesame"


def cluster(database_url: str, redis_url: str, **settings: Any) -> dict[str, Any]:
    return {"storage": {"url": database_url}, "cluster": {"redis_url": redis_url, **settings}}


async def test_a_gateway_in_a_cluster_answers_and_reports_its_redis_in_readyz_and_metrics(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    postgresql_database: str,
    redis_server: RedisServer,
) -> None:
    sections = cluster(postgresql_database, redis_server.url, instance_id="worker-a")
    async with telegram_gateway(home, emulator, emulator_url, **sections) as harness:
        gateway = harness.gateway
        assert gateway.services.runtime.cluster is not None
        harness.fake.private_message(FRIEND, "hello")
        await harness.settled()
        assert len(harness.texts(FRIEND)) == 1
        assert (await gateway.http.readiness())["ready"] is True
        metrics = gateway.services.metrics.render().decode()
        assert 'gateway_cluster_info{instance_id="worker-a"} 1.0' in metrics
        assert "gateway_session_leases_held 0.0" in metrics

        redis_server.halt()
        report = await gateway.http.readiness()  # returns (each probe is bounded): says what is wrong
        problems = report["problems"]
        assert report["ready"] is False and isinstance(problems, list)
        assert any(problem.startswith("redis: ") for problem in problems), problems
        assert not any(problem.startswith("database") for problem in problems), problems

        redis_server.start()  # on the same port, empty: Herald kept nothing there that matters
        async with asyncio.timeout(10):  # the work queue sees Redis back within a second or so
            while not (await gateway.http.readiness())["ready"]:  # noqa: ASYNC110 - polled over HTTP
                await asyncio.sleep(0.1)
        harness.fake.private_message(FRIEND, "hello again")
        await harness.settled()
        assert len(harness.texts(FRIEND)) == 2


async def test_a_turn_whose_session_another_process_took_over_stores_and_queues_nothing_more(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    postgresql_database: str,
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """This process is mid-turn when another process takes the session (it took a newer fencing token,
    as it does after this one stalled past its lease): the answer is refused by the store, no reply is
    queued, and the message is left to the new holder."""
    emulator.stream_delay = 0.02
    emulator.responder = lambda body, api: Reply(text="A slow answer. " * 30 + "THE END")
    async with telegram_gateway(
        home, emulator, emulator_url, **cluster(postgresql_database, redis_server.url)
    ) as harness:
        services = harness.gateway.services
        storage = services.runtime.storage
        harness.fake.private_message(FRIEND, "a question")
        await harness.fake.wait_for(lambda: emulator.in_flight > 0, 10.0, what="the turn streaming")
        keys = await storage.read(
            lambda conn: conn.execute(sa.select(session_fences.c.session_key)).scalars().all()
        )
        assert len(keys) == 1  # the chat's session, fenced since its lease was taken
        await issue_token(storage, keys[0])  # another process took the session over
        await harness.fake.wait_for(lambda: services.lanes.depth == 0, 20.0, what="the turn to end")
        assert "abandoned: session" in caplog.text and "taken over by a newer holder" in caplog.text
        [row] = await services.inbox.pending()
        assert row.state is InboxState.PENDING  # left for the process that has the session now
        assert await services.outbox.items_for(row.id) == []
        stored = await storage.read(
            lambda conn: conn.execute(sa.select(messages.c.role, messages.c.content)).all()
        )
        assert [role for role, _ in stored] == ["user"]  # the answer was refused
        assert not any("THE END" in text for text in harness.texts(FRIEND))
        assert services.runtime.locks.held == 0


def test_redis_that_cannot_be_reached_at_start_is_one_sentence_and_exit_2(
    home: HeraldHome, herald: Any, postgresql_database: str
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    home.config_path.write_text(
        json.dumps({"storage": {"url": postgresql_database}, "cluster": {"redis_url": url}})
    )
    result = herald("chat", "-q", "hello")
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "the cluster's Redis (redis 127.0.0.1:" in lines[0] and "cannot be reached" in lines[0]
    assert PASSWORD not in result.stdout + result.stderr


async def require_password(redis_server: RedisServer) -> None:
    client = Redis.from_url(redis_server.url)
    try:
        await client.config_set("requirepass", PASSWORD)
    finally:
        await client.aclose()


async def test_doctor_checks_the_redis_it_is_configured_for_without_printing_the_password(
    home: HeraldHome,
    postgresql_database: str,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from io import StringIO

    from gateway.doctor.cluster import check_redis
    from gateway.doctor.run import check_config, run_doctor

    await require_password(redis_server)
    with_password = redis_server.url.replace("redis://", f"redis://:{PASSWORD}@")
    home.config_path.write_text(
        json.dumps({"storage": {"url": postgresql_database}, "cluster": {"redis_url": "$REDIS_URL"}})
    )

    async def doctor(url: str) -> tuple[int, str]:
        out = StringIO()
        environ = {"REDIS_URL": url}
        code = await run_doctor(
            home, offline=True, out=out, checks=[check_config, check_redis], environ=environ
        )
        return code, out.getvalue()

    code, text = await doctor(with_password)
    assert code == 0, text
    assert f"[ok]   redis: redis://:***@127.0.0.1:{redis_server.port}/0 answers: Redis 7." in text
    assert "[ok]   redis: persistence: save '', appendonly no; Herald keeps nothing in Redis" in text
    assert "[ok]   redis: clients: " in text and "of 12 connections each (cluster.redis_connections" in text
    assert PASSWORD not in text

    code, text = await doctor(redis_server.url.replace("redis://", "redis://:wrong-password@"))
    assert code == 1
    assert "[FAIL] redis: redis://:***@127.0.0.1:" in text and "cannot be reached" in text
    assert "wrong-password" not in text


def test_doctor_says_when_redis_has_no_room_for_another_process() -> None:
    """maxclients against the clients connected and one more process's connections: a process Redis
    refuses cannot join the cluster, so the doctor says so before it happens."""
    from gateway.doctor.cluster import RedisFacts, clients_finding

    def said(maxclients: str, connected: int) -> tuple[str, str] | None:
        facts = RedisFacts("7.2.4", {"maxclients": maxclients}, False, connected)
        finding = clients_finding(facts, per_process=12)
        return None if finding is None else (finding.status, finding.text)

    roomy = said("10000", 37)
    assert roomy is not None and roomy[0] == "ok" and "room for 830 more gateway process(es)" in roomy[1]
    full = said("48", 37)  # three processes of 12 and the doctor's own connection
    assert full is not None and full[0] == "warn" and "another process would be refused" in full[1]
    assert said("", 37) is None  # CONFIG not allowed (managed Redis): nothing claimed


@pytest.mark.parametrize("storage", ["null", "sqlite", "a variable naming SQLite"])
def test_a_cluster_without_postgresql_is_refused_in_one_sentence(
    home: HeraldHome, herald: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, storage: str
) -> None:
    sqlite = tmp_path / "elsewhere.db"
    urls = {"null": "null", "sqlite": f"sqlite:///{sqlite}", "a variable naming SQLite": "$HERALD_STATE_URL"}
    monkeypatch.setenv("HERALD_STATE_URL", f"sqlite:///{sqlite}")
    home.config_path.write_text(
        f"storage:\n  url: {urls[storage]}\ncluster:\n  redis_url: redis://127.0.0.1:9/0\n"  # never asked
    )
    result: Ran = herald("chat", "-q", "hi")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count(CLUSTER_NEEDS_POSTGRESQL) == 1 and "Traceback" not in result.stderr
    assert not sqlite.exists()  # refused before any database was opened
