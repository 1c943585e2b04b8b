"""The cluster's work queue: gateways in one event loop on one PostgreSQL, one Redis, one fake Telegram.

Every message is answered exactly once and in order per chat, whichever process reads its entry; work is
spread over the processes; a process that stops mid-turn leaves its message to another; /stop reaches
the process running the turn; Redis going away loses nothing; the cluster-wide turn cap holds.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from gateway.app import Gateway
from gateway.cluster.queue.work_stream import Entry, WorkStream
from gateway.home import HeraldHome
from gateway.intake.work import Work, WorkKind
from gateway.ledger.inbox import InboxEntry
from tests.cluster_support import LEASE_TTL, answer_each, inbound, open_cluster
from tests.emulator import ProviderEmulator
from tests.postgres import PostgresServer
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(120)]

FIRST_CHAT = 1000


async def cluster_report(gateway: Gateway) -> dict[str, Any]:
    """What the gateway's ``/readyz`` says of it as a cluster member."""
    return cast(dict[str, Any], (await gateway.http.readiness())["cluster"])


async def model_asked(emulator: ProviderEmulator, count: int = 1) -> None:
    async with asyncio.timeout(30):
        while len(emulator.requests) < count:  # noqa: ASYNC110 - the emulator has no event to wait on
            await asyncio.sleep(0.02)


async def test_many_chats_are_answered_once_each_in_order_spread_over_the_processes(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    emulator.responder = answer_each
    emulator.stream_delay = 0.01  # a turn takes a moment, so one process cannot take every chat
    chats, per_chat = 12, 3
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
        gateway={"max_concurrent_turns": 3},
    ) as cluster:  # fmt: skip
        for n in range(per_chat):
            for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
                cluster.fake.private_message(chat, f"c{chat} m{n}")
        await cluster.settled()
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            assert await cluster.queued(chat) == [f"Answer to c{chat} m{n}" for n in range(per_chat)]
            assert cluster.answers(chat) == [f"Answer to c{chat} m{n}" for n in range(per_chat)]
        assert len(emulator.requests) == chats * per_chat  # no turn ran twice
        done = [cluster.turns_answered(index) for index in range(3)]
        assert sum(done) == chats * per_chat and all(done), done  # every process answered some
        assert (await cluster.states())["answered"] == chats * per_chat


async def test_a_later_entry_read_first_still_answers_the_chat_in_order(
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
        services = cluster.gateways[0].services
        cluster.fake.register_chat(FIRST_CHAT)
        key = "telegram:dm:1000"
        rows = await services.inbox.record_batch(
            [InboxEntry(inbound(FIRST_CHAT, f"q{n}", str(n)), key) for n in range(3)]
        )
        ids = [row.id for row in rows if row is not None]
        stream = cluster.queue(0).stream
        # The entries arrive in the wrong order, twice, and the first never on its own.
        await stream.add([Work(WorkKind.MESSAGE, key, ids[2]), Work(WorkKind.MESSAGE, key, ids[1])])
        await stream.add([Work(WorkKind.MESSAGE, key, ids[2])])
        await cluster.settled()
        assert await cluster.queued(FIRST_CHAT) == ["Answer to q0", "Answer to q1", "Answer to q2"]
        assert cluster.answers(FIRST_CHAT) == ["Answer to q0", "Answer to q1", "Answer to q2"]
        assert len(emulator.requests) == 3
        assert (await stream.stats()).pending == 0  # every entry acknowledged


async def test_a_message_stored_without_an_entry_is_queued_by_the_periodic_rebuild(
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
        cluster.fake.register_chat(FIRST_CHAT)
        # As a process that died between storing a message and adding its entry leaves it.
        await cluster.gateways[0].services.inbox.record(
            inbound(FIRST_CHAT, "forgotten", "1"), "telegram:dm:1000"
        )
        await cluster.settled(timeout=3 * LEASE_TTL + 10)
        assert await cluster.queued(FIRST_CHAT) == ["Answer to forgotten"]
        assert cluster.answers(FIRST_CHAT) == ["Answer to forgotten"]


async def test_a_message_stored_while_the_queue_comes_back_is_queued_without_waiting_for_the_periodic_pass(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulator.responder = answer_each
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=1,
        cluster={"lease_ttl": 600.0},  # the periodic pass would take ten minutes to queue a forgotten row
    ) as cluster:  # fmt: skip
        cluster.fake.register_chat(FIRST_CHAT)
        queue, router = cluster.queue(0), cluster.gateways[0].router
        await asyncio.to_thread(redis_server.halt)
        async with asyncio.timeout(20):
            while queue.problem is None:  # noqa: ASYNC110 - the queue notices at its next command
                await asyncio.sleep(0.05)
        stored_work = queue.order.stored_work
        arrived = asyncio.Event()

        async def a_message_arrives_right_after_the_read(older_than: float = 0.0) -> list[Work]:
            found = await stored_work(older_than)
            if not arrived.is_set():
                await router.handle([inbound(FIRST_CHAT, "just in time", "1")])  # stored and submitted
                arrived.set()
            return found

        monkeypatch.setattr(queue.order, "stored_work", a_message_arrives_right_after_the_read)
        await asyncio.to_thread(redis_server.restart)
        async with asyncio.timeout(20):
            await arrived.wait()
        await cluster.settled(timeout=30)
        assert cluster.answers(FIRST_CHAT) == ["Answer to just in time"]


async def test_a_message_whose_entry_was_being_appended_when_its_process_stopped_is_queued_at_once(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process stopped (SIGTERM: its queue closed) while its appender was adding a message's entry:
    the entry is added as it closes, and another process answers at once, not after the periodic
    rebuild (here ten minutes away; it was a minute with the default lease)."""
    emulator.responder = answer_each
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=2,
        cluster={"lease_ttl": 600.0},
    ) as cluster:  # fmt: skip
        cluster.fake.register_chat(FIRST_CHAT)
        queue = cluster.queue(0)
        add = queue.stream.add
        appending = asyncio.Event()

        async def held(work: Any) -> None:
            if not appending.is_set():  # the first append hangs until the process stops
                appending.set()
                await asyncio.Event().wait()
            await add(work)

        monkeypatch.setattr(queue.stream, "add", held)
        await cluster.gateways[0].router.handle([inbound(FIRST_CHAT, "stored as it stops", "1")])
        async with asyncio.timeout(20):
            await appending.wait()
        await cluster.close(0)
        await cluster.settled(timeout=30)
        assert cluster.answers(FIRST_CHAT) == ["Answer to stored as it stops"]


async def test_a_process_stopped_mid_turn_leaves_the_message_to_another_after_the_lease_time(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process claims the message's stream entry once Redis saw it idle ``lease_ttl`` (the
    stopped process no longer touches it), and answers it: shown by the claim, not by a stopwatch."""
    claims: list[tuple[str, int, int]] = []  # (consumer, min_idle_ms, entries) of each claim that took some
    claim_idle = WorkStream.claim_idle

    async def recorded(stream: WorkStream, min_idle_ms: int, count: int) -> list[Entry]:
        entries = await claim_idle(stream, min_idle_ms, count)
        if entries:
            claims.append((stream.consumer, min_idle_ms, len(entries)))
        return entries

    monkeypatch.setattr(WorkStream, "claim_idle", recorded)
    emulator.responder = answer_each
    emulator.stall_next(60)  # the first attempt hangs until its process stops
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
        gateway={"drain_timeout": 0.2},
    ) as cluster:  # fmt: skip
        cluster.fake.private_message(FIRST_CHAT, "who answers me?")
        stopped = await cluster.wait_running()
        await model_asked(emulator)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await cluster.close(stopped)
        await cluster.settled()
        waited = loop.time() - began
        assert await cluster.queued(FIRST_CHAT) == ["Answer to who answers me?"]
        assert cluster.answers(FIRST_CHAT) == ["Answer to who answers me?"]
        assert len(emulator.requests) == 2  # the cut-off attempt and the one that answered
        [(claimer, min_idle_ms, taken)] = claims  # claimed once, one entry, idle the whole lease in Redis
        assert claimer != cluster.queue(stopped).stream.consumer
        assert (min_idle_ms, taken) == (int(LEASE_TTL * 1000), 1)
        assert waited >= LEASE_TTL - 1, waited  # not before the lease time (a load only makes it later)


async def test_stop_from_one_process_cancels_the_turn_running_in_another(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    emulator.stall_next(60)
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database
    ) as cluster:
        cluster.fake.private_message(FIRST_CHAT, "a long question")
        running = await cluster.wait_running()
        await model_asked(emulator)
        # /readyz of the process running the turn shows it, its session lease and the queue's lag.
        async with asyncio.timeout(10):  # measured every 2 s; the entry waits for its turn to end
            while True:
                report = await cluster_report(cluster.gateways[running])
                if (report["queue"]["oldest_seconds"] or 0) >= 1:
                    break
                await asyncio.sleep(0.05)
        assert report["session_leases"] == 1
        assert report["queue"]["running"] == 1 and report["queue"]["pending"] == 1
        other = next(index for index in cluster.live if index != running)
        assert await cluster.queue(other).busy("telegram:dm:1000")  # /status there says "answering now"
        await cluster.gateways[other].router.handle([inbound(FIRST_CHAT, "/stop", "9001")])
        await cluster.settled(timeout=20)
        assert await cluster.queued(FIRST_CHAT) == ["Stopped."]
        assert cluster.answers(FIRST_CHAT) == ["Stopped."]
        states = await cluster.states()
        assert states["cancelled"] == 1 and states["answered"] == 1  # the turn, and /stop's own row


async def test_stop_stops_a_turn_in_another_process_whose_control_messages_are_all_lost(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulator.stall_next(60)
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=2
    ) as cluster:
        # Pub/sub keeps nothing for a subscriber that is reconnecting. redis-py resubscribes within
        # milliseconds, so the loss is made certain: every message published from now on is dropped.
        for index in cluster.live:
            monkeypatch.setattr(cluster.queue(index).control, "_receive", lambda data: None)
        redis = cluster.gateways[0].services.runtime.cluster.redis  # type: ignore[union-attr]
        assert await redis.client_kill_filter(_type="pubsub") >= 2
        cluster.fake.private_message(FIRST_CHAT, "a long question")
        running = await cluster.wait_running()
        await model_asked(emulator)
        other = 1 - running
        assert await cluster.queue(other).busy("telegram:dm:1000")  # not "idle": nothing to have heard
        await cluster.gateways[other].router.handle([inbound(FIRST_CHAT, "/stop", "9001")])
        await cluster.settled(timeout=20)
        assert await cluster.queued(FIRST_CHAT) == ["Stopped."]  # not "Nothing is running.", no answer
        assert cluster.answers(FIRST_CHAT) == ["Stopped."]
        states = await cluster.states()
        assert states["cancelled"] == 1 and states["answered"] == 1


async def test_stop_while_redis_is_away_says_it_stopped_nothing(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=1
    ) as cluster:
        cluster.fake.register_chat(FIRST_CHAT)
        await asyncio.to_thread(redis_server.halt)
        await cluster.gateways[0].router.handle([inbound(FIRST_CHAT, "/stop", "9001")])
        async with asyncio.timeout(20):
            while not await cluster.queued(FIRST_CHAT):  # noqa: ASYNC110 - the outbox is a table
                await asyncio.sleep(0.05)
        await asyncio.to_thread(redis_server.restart)  # sending waits for the shared send pacing
        await cluster.settled(timeout=20)
        said = (
            "I can't reach the other gateway processes right now, so nothing was stopped; "
            "send /stop again in a moment."
        )
        assert await cluster.queued(FIRST_CHAT) == [said]
        assert cluster.answers(FIRST_CHAT) == [said]


async def test_a_new_message_interrupts_a_turn_running_in_another_process(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    emulator.responder = answer_each
    emulator.stall_next(60)
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
        count=2, gateway={"busy_policy": "interrupt"},
    ) as cluster:  # fmt: skip
        cluster.fake.private_message(FIRST_CHAT, "first")
        running = await cluster.wait_running()
        await model_asked(emulator)
        other = 1 - running
        await cluster.gateways[other].router.handle([inbound(FIRST_CHAT, "second", "9002")])
        await cluster.settled(timeout=20)
        assert await cluster.queued(FIRST_CHAT) == ["Answer to second"]
        assert cluster.answers(FIRST_CHAT) == ["Answer to second"]
        assert (await cluster.states())["cancelled"] == 1


async def test_redis_halted_and_restarted_under_load_loses_nothing_and_doubles_nothing(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    emulator.responder = answer_each
    emulator.stream_delay = 0.01
    chats = 8
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=2
    ) as cluster:
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat} before")
        await asyncio.to_thread(redis_server.halt)
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat} during")  # stored; no entry can be added
        async with asyncio.timeout(20):
            while any(cluster.queue(index).problem is None for index in range(2)):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        report = await cluster.gateways[0].http.readiness()
        assert not report["ready"] and any("Redis" in problem for problem in report["problems"])  # type: ignore[attr-defined]
        async with asyncio.timeout(20):
            while cluster.fake.pending_updates():  # noqa: ASYNC110 - the webhook keeps storing
                await asyncio.sleep(0.05)
        await asyncio.to_thread(redis_server.restart)  # empty: the stream is rebuilt from the database
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat} after")
        await cluster.settled()
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            expected = [f"Answer to c{chat} {when}" for when in ("before", "during", "after")]
            assert await cluster.queued(chat) == expected
            assert cluster.answers(chat) == expected
        assert len(emulator.requests) == 3 * chats
        assert sum(cluster.queue(index).rebuilds for index in range(2)) >= 1
        assert all(cluster.queue(index).problem is None for index in range(2))
        assert (await cluster.gateways[1].http.readiness())["ready"]


async def test_the_cluster_wide_turn_cap_holds_over_the_processes(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    emulator.responder = answer_each
    emulator.stream_delay = 0.02
    chats = 10
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
        gateway={"max_concurrent_turns": 4}, cluster={"max_concurrent_turns": 2},
    ) as cluster:  # fmt: skip
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, sum(cluster.queue(index).running for index in range(3)))
                await asyncio.sleep(0.005)

        watching = asyncio.create_task(watch())
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat}")
        await cluster.settled()
        watching.cancel()
        assert peak == 2, peak
        assert len(emulator.requests) == chats
        text = cluster.gateways[0].services.metrics.render().decode()
        assert "gateway_cluster_queue_oldest_seconds" in text and "gateway_cluster_running" in text


async def test_postgresql_halted_and_resumed_under_load_loses_nothing_and_doubles_nothing(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    own_postgres: PostgresServer,
) -> None:
    emulator.responder = answer_each
    emulator.stream_delay = 0.02
    chats = 6
    url = own_postgres.new_database()  # a PostgreSQL of its own, to halt under the cluster's feet
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=url, count=2
    ) as cluster:
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat} before")
        await model_asked(emulator)  # turns are under way on both processes
        await asyncio.to_thread(own_postgres.halt)
        posted = len(cluster.fake.webhook_deliveries)
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat} during")  # cannot be stored: not confirmed
        await cluster.fake.wait_for(
            lambda: any(d.status != 200 for d in cluster.fake.webhook_deliveries[posted:]),
            what="a webhook POST refused while the database is away",
        )
        assert cluster.fake.pending_updates()
        async with asyncio.timeout(10):  # /readyz tells once it measured the database
            while True:
                report = await cluster.gateways[1].http.readiness()
                if any("database" in p for p in report["problems"]):  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.05)
        assert not report["ready"]
        await asyncio.to_thread(own_postgres.resume)
        await cluster.fake.retry_webhook()  # Telegram delivers the refused updates again
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            cluster.fake.private_message(chat, f"c{chat} after")
        await cluster.settled()
        for chat in range(FIRST_CHAT, FIRST_CHAT + chats):
            expected = [f"Answer to c{chat} {when}" for when in ("before", "during", "after")]
            assert await cluster.queued(chat) == expected
            assert cluster.answers(chat) == expected
        assert (await cluster.gateways[0].http.readiness())["ready"]
