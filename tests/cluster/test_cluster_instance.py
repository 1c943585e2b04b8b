"""A process's name in the cluster (``cluster.instance_id``, default host-pid) is one running process's:
a second process given the same name refuses to start in one sentence; a name left claimed by a process
of this host that died is taken over at once (``gateway.cluster.instance``)."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from redis.asyncio import Redis

from gateway.cluster.instance import claim_key, machine
from gateway.cluster.redis import connect
from gateway.failures import EXIT_UNUSABLE, CommandFailed, explain
from gateway.home import HeraldHome
from tests.cluster_support import open_cluster
from tests.emulator import ProviderEmulator
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(60)]

LEADER_TTL = 4.0  # a claim of a process that died lapses this fast; a live one stalled for less is kept


async def claim_left_by_a_dead_pid(redis: Redis, where: str) -> str:
    """Process g0's name claimed on machine ``where`` by a pid that no longer runs here (the claim would
    not lapse during a test); returns the claim's value."""
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    value = f"{socket.gethostname()} {gone.pid} 0000 {where}"
    await redis.set(claim_key("g0"), value, px=600_000)
    return value


async def test_a_second_process_with_the_same_instance_id_refuses_to_start_in_one_sentence(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    with pytest.raises(CommandFailed) as refused:
        async with open_cluster(
            home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
            count=2, cluster={"instance_id": "same", "leader_ttl": LEADER_TTL},
        ):  # fmt: skip
            pytest.fail("the second process started")
    failure = explain(refused.value)
    assert failure.code == EXIT_UNUSABLE
    assert failure.message == (
        f"cluster.instance_id same is in use by a running process (host {socket.gethostname()}, pid "
        f"{os.getpid()}); give each process a name of its own (herald gateway run --instance NAME)"
    )
    redis = connect(redis_server.url)
    async with redis:
        assert await redis.get(claim_key("same")) is None  # the first process released it on its way out


async def test_a_name_left_claimed_by_a_process_of_this_host_that_died_is_taken_over_at_once(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    redis = connect(redis_server.url)
    async with redis:
        await claim_left_by_a_dead_pid(redis, machine())  # on this very machine
        async with open_cluster(
            home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
            count=1, cluster={"leader_ttl": LEADER_TTL},
        ):  # fmt: skip
            claim = await redis.get(claim_key("g0"))
            assert claim is not None and str(claim).startswith(f"{socket.gethostname()} {os.getpid()} ")


async def test_the_default_instance_id_is_host_and_pid(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
        count=1, cluster={"instance_id": None},
    ) as cluster:  # fmt: skip
        name = f"{socket.gethostname()}-{os.getpid()}"
        report = await cluster.gateways[0].http.readiness()
        assert report["ready"] and report["cluster"]["instance"] == name  # type: ignore[index]
        assert cluster.queue(0).stream.consumer == name
        redis = connect(redis_server.url)
        async with redis:
            assert await redis.exists(claim_key(name))


async def test_a_claim_of_the_same_host_name_on_another_machine_is_never_taken_by_its_pid(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
) -> None:
    """A cloned VM or a container with the same --hostname: its pid says nothing here, so a live claim
    of it is waited for (it does not lapse) and refused, never taken over as a previous life's."""
    redis = connect(redis_server.url)
    async with redis:
        elsewhere = await claim_left_by_a_dead_pid(redis, "another-machine")  # where that pid may run
        with pytest.raises(CommandFailed, match="is in use by a running process"):
            async with open_cluster(
                home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database,
                count=1, cluster={"leader_ttl": LEADER_TTL},
            ):  # fmt: skip
                pytest.fail("took over a live claim of another machine")
        assert await redis.get(claim_key("g0")) == elsewhere
