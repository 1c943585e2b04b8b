"""Background reviews in a cluster: one per chat over every process, stopped by a live turn of the chat
on any process (``gateway.cluster.leases.review_claims``), and the idle-review sweeper runs on the leader
only."""

from __future__ import annotations

from collections import Counter

import pytest

from gateway.conversation import reviews as reviews_module
from gateway.conversation.reviews import Reviews
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime
from tests.cluster.test_cluster_queue import model_asked
from tests.cluster_leader_support import LEADER_TTL, SLACK, telegram_cluster, until
from tests.cluster_support import answer_each, open_cluster
from tests.emulator import ProviderEmulator
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(90)]

CHAT = 1000
KEY = "telegram:dm:1000"


async def test_a_chat_is_reviewed_once_in_the_cluster_and_a_live_turn_in_another_process_stops_it(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    emulator.responder = answer_each
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=2
    ) as cluster:
        cluster.fake.private_message(CHAT, "remember that I like tea")
        await cluster.settled()
        a, b = cluster.gateways[0].services, cluster.gateways[1].services
        session = await a.runtime.store.sessions.latest(KEY)
        assert session is not None
        asked = len(emulator.requests)
        emulator.stall_next(60)  # the review's model call hangs: it runs until something stops it
        a.reviews.start(session)
        await model_asked(emulator, asked + 1)
        b.reviews.start(session)  # the same chat's review in another process: not a second one
        await until(lambda: b.reviews.running == 0, SLACK, "the second review giving up")
        assert len(emulator.requests) == asked + 1 and a.reviews.running == 1
        b.reviews.cancel(KEY)  # what a live turn of the chat in process b does before it starts
        await until(lambda: a.reviews.running == 0, SLACK, "the review in process a stopping")
        assert a.metrics.reviews.labels("cancelled")._value.get() == 1
        assert b.metrics.reviews.labels("cancelled")._value.get() == 0


async def test_the_idle_review_sweeper_runs_on_the_leader_only_and_moves_with_it(
    home: HeraldHome,
    emulator_url: str,
    postgresql_database: str,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reviews_module, "SWEEP_EVERY", 0.05)
    sweeps: Counter[str] = Counter()
    sweep = Reviews.sweep

    async def counted(self: Reviews) -> int:
        runtime = self.runtime  # the wiring's Runtime: it knows the process's part in the cluster
        assert isinstance(runtime, Runtime) and runtime.cluster is not None
        sweeps[runtime.cluster.instance_id] += 1
        return await sweep(self)

    monkeypatch.setattr(Reviews, "sweep", counted)
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b", "c"]
    ) as cluster:
        leader = await cluster.leader()
        await until(lambda: sweeps[leader] >= 5, SLACK, "the leader sweeping")
        assert set(sweeps) == {leader}, sweeps
        await cluster.close(leader)
        successor = await cluster.leader(LEADER_TTL + SLACK)
        await until(lambda: sweeps[successor] >= 5, SLACK, "the new leader sweeping")
        assert set(sweeps) == {leader, successor}, sweeps
