"""One connector, elected: several gateways on one PostgreSQL, one Redis and one fake Telegram, in one
event loop. Exactly one polls; when it stops (or cannot renew its lease, or Redis goes away) another
polls within ``cluster.leader_ttl``; never two at once; no update is lost or answered twice; the
scheduler fires a job once across the processes."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
import pytest

from adapters.telegram.webhook import SECRET_HEADER, webhook_secret
from agent.memory import OWNER_SCOPE
from gateway.cluster.leases.leader import Leadership
from gateway.cron.jobs import NewJob, parse_target
from gateway.cron.scheduler import CronScheduler
from gateway.home import HeraldHome
from tests.cluster_leader_support import (
    LEADER_TTL,
    SLACK,
    USERS,
    Cluster,
    LeaseCalls,
    cut_off,
    telegram_cluster,
    until,
)
from tests.emulator import ProviderEmulator
from tests.fakes import FakeTelegram
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(180)]  # PostgreSQL whatever --storage says


async def send_steadily(fake: FakeTelegram, users: list[int], every: float) -> None:
    """One message from each user, ``every`` seconds apart (a chat each)."""
    for user in users:
        fake.private_message(user, f"hello from {user}")
        await asyncio.sleep(every)


def renewals(leadership: Leadership) -> int:
    renewer = leadership._renewer
    return 0 if renewer is None else renewer.renewals


def assert_one_poller_at_a_time(fake: FakeTelegram) -> None:
    assert fake.poll_overlaps == [], "two getUpdates callers at once"
    refused = [c for c in fake.calls_to("getUpdates") if c.status == 409]
    assert refused == [], refused


def assert_each_answered_once(cluster: Cluster, users: list[int]) -> None:
    counts = {user: len(cluster.bot_messages(user)) for user in users}
    assert all(count == 1 for count in counts.values()), {u: c for u, c in counts.items() if c != 1}


async def test_one_gateway_polls_and_another_takes_over_within_the_ttl_when_it_stops(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A leader stopped by SIGTERM hands the lease over: it releases it, and the next process wins it
    at its next try (every ``leader_ttl/3``), not after the lease's TTL, on a slow machine too."""
    users = USERS[:40]
    leases = LeaseCalls.record(monkeypatch)
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b", "c"]
    ) as cluster:
        first = await cluster.leader()
        leadership = cluster.member(first).leadership
        await until(lambda: renewals(leadership) >= 1, LEADER_TTL, "a renewal")  # the lease is kept
        assert cluster.leaders() == [first]
        assert {cluster.member(n).role for n in cluster.gateways} == {"leader", "worker"}
        sending = asyncio.create_task(send_steadily(cluster.fake, users, every=0.05))
        await until(lambda: sum(bool(cluster.bot_messages(u)) for u in users) >= 5, SLACK,
                    "the first leader's updates answered")  # fmt: skip  # it stops mid-stream
        key = leadership.key
        await cluster.close(first)  # SIGTERM: it resigns, drains and closes
        second = await cluster.leader()
        assert second != first
        leases.assert_handed_over(key, first, second)
        await sending
        await cluster.settled()
        assert_each_answered_once(cluster, users)
    assert_one_poller_at_a_time(cluster.fake)


async def test_a_term_that_ends_while_the_scheduler_starts_leaves_it_for_the_next_term_to_start(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The term ends (here: the connection to Redis "broke") while the new leader's scheduler is
    half-started, its first reading of the jobs waiting on the database: what it had started is stopped,
    so the next term starts it afresh rather than failing ("already running") term after term."""
    caplog.set_level(logging.INFO, logger="gateway.cron.scheduler")
    reading = asyncio.Event()
    sync = CronScheduler.sync

    async def first_sync_hangs(scheduler: CronScheduler) -> None:
        if not reading.is_set():
            reading.set()
            await asyncio.Event().wait()  # until cancelled
        await sync(scheduler)

    monkeypatch.setattr(CronScheduler, "sync", first_sync_hangs)
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a"], cluster={"leader_ttl": 2.0}
    ) as cluster:
        leadership = cluster.member("a").leadership
        await until(reading.is_set, SLACK, "the scheduler starting")
        leadership.suspect()
        await until(
            lambda: any("scheduler running" in r.getMessage() for r in caplog.records),
            2.0 + SLACK,
            "the scheduler started by the next term",
        )
        assert leadership.holds() and leadership.terms == 2
    assert not [r for r in caplog.records if "failed to start" in r.getMessage()]


async def test_a_leader_that_cannot_renew_stops_polling_before_another_starts(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The leader's renewals hang (a partition between it and Redis): it stops polling after half the
    TTL, the lease expires, another polls; the stalled process goes on as a worker."""
    users = USERS[:30]
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b"]
    ) as cluster:
        first = await cluster.leader()
        stalled = cluster.member(first).leadership
        sending = asyncio.create_task(send_steadily(cluster.fake, users, every=0.05))
        await until(lambda: len(cluster.fake.calls_to("getUpdates")) > 0, SLACK, "polling")
        cut_off(monkeypatch, first)  # its renewals, releases and tries to win hang from now on
        await until(lambda: not stalled.leading, LEADER_TTL, "the stalled leader stepping down")
        await cluster.leader(LEADER_TTL + SLACK)
        await sending
        await cluster.settled()
        assert_each_answered_once(cluster, users)
    assert_one_poller_at_a_time(cluster.fake)


async def test_redis_down_nobody_polls_and_polling_resumes_when_it_is_back(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer
) -> None:
    users = USERS[:10]
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b"]
    ) as cluster:
        await cluster.leader()
        redis_server.halt()
        await until(lambda: not cluster.leaders(), LEADER_TTL + SLACK, "stepping down without Redis")
        fake = cluster.fake
        await until(
            lambda: all(c.status is not None for c in fake.calls_to("getUpdates")), SLACK, "polls ending"
        )
        polls = len(fake.calls_to("getUpdates"))
        for user in users:
            fake.private_message(user, "while Redis is away")
        sent = time.monotonic()
        leaderships = [cluster.member(name).leadership for name in cluster.gateways]
        await until(  # each process tried to win since (and found Redis away): its chance to poll
            lambda: all((lead._redis_away_at or 0.0) > sent for lead in leaderships),
            LEADER_TTL + SLACK,
            "a try to win by each process",
        )
        assert len(fake.calls_to("getUpdates")) == polls  # nobody polls
        assert len(fake.pending_updates()) == len(users)  # Telegram keeps them
        for gateway in cluster.gateways.values():
            ready = await gateway.http.readiness()
            problems = ready["problems"]
            assert not ready["ready"] and isinstance(problems, list) and any("redis" in p for p in problems)
        redis_server.start()
        await cluster.leader(LEADER_TTL + SLACK)
        await cluster.settled()
        assert_each_answered_once(cluster, users)
    assert_one_poller_at_a_time(cluster.fake)


async def test_the_scheduler_fires_a_job_once_across_the_processes(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, postgresql_database: str,
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    fast = {"poll_interval": 0.2}  # the leader reads the job table often (the job is added elsewhere)
    syncs = [0]  # readings of the job table, by any process's scheduler
    sync = CronScheduler.sync

    async def counted_sync(scheduler: CronScheduler) -> None:
        await sync(scheduler)
        syncs[0] += 1

    monkeypatch.setattr(CronScheduler, "sync", counted_sync)
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b", "c"], scheduler=fast
    ) as cluster:
        leader = await cluster.leader()
        worker = next(name for name in cluster.gateways if name != leader)
        cluster.fake.register_chat(USERS[0])
        jobs = cluster.gateways[worker].services.runtime.cron.jobs
        job = await jobs.add(
            NewJob("Ping", "say ping", "every 1h", parse_target(f"telegram:{USERS[0]}"), "cli:local",
                   OWNER_SCOPE, None, time.time() + 0.5)
        )  # fmt: skip
        # Bounds on waiting, not speeds: on a loaded machine the leader may step down mid-run (its event
        # loop starved past leader_ttl/2) and the next leader resumes the run once the lease lapsed.
        await until(lambda: len(cluster.bot_messages(USERS[0])) >= 1, 60.0, "the job's run")
        # Read twice since by a scheduler: a job the table still showed due would have fired by now.
        synced = syncs[0]
        await until(lambda: syncs[0] >= synced + 2, 60.0, "the jobs read again")
        ran = await jobs.get(job.id)
        await cluster.settled()
    assert ran is not None and ran.next_run_at is not None and ran.next_run_at > time.time() + 3000
    assert len(cluster.bot_messages(USERS[0])) == 1
    assert len([r for r in emulator.requests if b"say ping" in r.body]) == 1


async def test_readyz_and_metrics_show_each_process_role(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer
) -> None:
    async with telegram_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b"]
    ) as cluster:
        leader = await cluster.leader()
        for name in cluster.gateways:  # the queue's first measurement
            queue = cluster.member(name).queue
            await until(lambda queue=queue: queue.stats is not None, SLACK, "the queue measured")  # type: ignore[misc]
        async with aiohttp.ClientSession() as session:
            for name, gateway in cluster.gateways.items():
                async with session.get(f"{gateway.http.url}/readyz") as response:
                    report = await response.json()
                    assert response.status == 200, report
                role = "leader" if name == leader else "worker"
                assert report["cluster"] == {
                    "instance": name,
                    "role": role,
                    "leases": ["leader"] if role == "leader" else [],
                    "session_leases": 0,
                    "queue": {"oldest_seconds": 0.0, "pending": 0, "unread": 0, "running": 0},
                }
                async with session.get(f"{gateway.http.url}/metrics") as response:
                    metrics = await response.text()
                assert f'gateway_cluster_role{{instance="{name}",role="{role}"}} 1.0' in metrics
                assert (
                    f'gateway_cluster_leases{{kind="leader"}} {1.0 if role == "leader" else 0.0}' in metrics
                )
                assert "gateway_session_leases_held 0.0" in metrics
                assert "gateway_cluster_queue_oldest_seconds 0.0" in metrics
                assert "gateway_cluster_queue_pending 0.0" in metrics
                assert "gateway_cluster_running 0.0" in metrics
                assert "gateway_redis_connections_limit 12.0" in metrics  # cluster.redis_connections
                assert 0 < figure(metrics, "gateway_redis_connections_open") <= 12
                assert 0 < figure(metrics, "gateway_redis_connections_in_use") <= 12  # the listeners
                assert "gateway_redis_pool_waits_total " in metrics


def figure(metrics: str, name: str) -> float:
    """The value of the sample ``name`` (no labels) in a /metrics text."""
    return float(next(line for line in metrics.splitlines() if line.startswith(f"{name} ")).split()[1])


async def test_webhook_mode_every_process_accepts_and_only_the_leader_sets_the_webhook(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer
) -> None:
    """Behind a load balancer any process takes Telegram's POSTs: each checks the secret, stores and
    answers 200; a redelivery to another process is answered once. Only the leader calls setWebhook."""
    fake = FakeTelegram()
    fake.webhook_autodeliver = False  # the test is the load balancer: it POSTs to each process itself
    webhook = {"mode": "webhook", "webhook_url": "https://127.0.0.1:9/telegram/webhook"}
    users = USERS[:9]
    async with telegram_cluster(
        home,
        emulator_url,
        postgresql_database,
        redis_server.url,
        ["a", "b", "c"],
        fake=fake,
        telegram=webhook,
        cluster={"leader_ttl": 10.0},  # mostly one term throughout (a loaded machine may make another)
    ) as cluster:
        await cluster.leader()
        # At least one: a loop stalled past leader_ttl/2 by a loaded machine makes another term (one each).
        await until(lambda: len(fake.calls_to("setWebhook")) >= 1, SLACK, "the leader setting the webhook")
        urls = [f"{g.http.url}/telegram/webhook" for g in cluster.gateways.values()]
        good = {SECRET_HEADER: webhook_secret(fake.token)}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as client:
            updates = [fake.private_message(user, f"via webhook {user}") for user in users]
            for index, update in enumerate(updates):
                async with client.post(urls[index % 3], json=update, headers=good) as response:
                    assert response.status == 200
            for index, update in enumerate(updates[:3]):  # redelivered, to another process
                async with client.post(urls[(index + 1) % 3], json=update, headers=good) as response:
                    assert response.status == 200
            async with client.post(urls[1], json=updates[0], headers={SECRET_HEADER: "wrong"}) as response:
                assert response.status == 403
        await until(lambda: all(cluster.bot_messages(u) for u in users), 20.0, "every message answered")
        with fake.lock:  # delivered by hand: nothing is confirmed by offsets in webhook mode
            fake.pending.clear()
        await cluster.settled()
        assert_each_answered_once(cluster, users)
        terms = sum(cluster.member(name).leadership.terms for name in cluster.gateways)
        assert len(fake.calls_to("setWebhook")) == terms  # once per leader's term, never by the others
        assert not fake.calls_to("deleteWebhook") and not fake.calls_to("getUpdates")
