"""Retention in a running gateway: one process alone prunes in the background from its start; in a
cluster only the leader does, and the next leader takes it over."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
import sqlalchemy as sa

from agent.api import SessionStore
from agent.db import Storage, requests
from agent.db.schema import usage_days
from agent.prompt import SystemPrompt
from agent.store import NewSession
from agent.usage import RequestUsage, Usage
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.retention.pruner import Pruner
from tests.cluster_leader_support import LEADER_TTL, SLACK, telegram_cluster, until
from tests.emulator import ProviderEmulator
from tests.gateway_support import telegram_gateway
from tests.redis_server import RedisServer

DAY = 86_400.0


async def an_old_request(storage: Storage) -> None:
    store = SessionStore(storage)
    await store.sessions.create(
        NewSession(
            id="s", session_key="telegram:dm:1", source="telegram", platform="telegram",
            system_prompt=SystemPrompt("s", "", ""), tools_json="[]", provider="anthropic", model="m",
        )
    )  # fmt: skip
    usage = RequestUsage("turn", "anthropic", "m", Usage(input_tokens=10, output_tokens=1), 0.01, 0.02)
    await store.usage.record("s", usage, at=time.time() - 200 * DAY)


async def rows(storage: Storage) -> int:
    query = sa.select(sa.func.count()).select_from(requests)
    return int(await storage.read(lambda conn: conn.execute(query).scalar_one()))


async def test_a_gateway_alone_prunes_in_the_background_from_its_start(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with open_home_storage(home) as storage:
        await an_old_request(storage)
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        storage = harness.gateway.services.runtime.storage
        began = time.monotonic()
        while await rows(storage):
            assert time.monotonic() - began < SLACK, "the old usage row was not rolled up"
            await asyncio.sleep(0.02)
        rolled = sa.select(sa.func.sum(usage_days.c.requests))
        assert await storage.read(lambda conn: conn.execute(rolled).scalar_one()) == 1


@pytest.mark.own_database
@pytest.mark.timeout(90)
async def test_in_a_cluster_only_the_leader_prunes_and_the_next_one_takes_over(
    home: HeraldHome,
    emulator_url: str,
    postgresql_database: str,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes: Counter[int] = Counter()  # by the storage of the process that pruned
    prune = Pruner.prune

    async def counted(self: Pruner, *, dry_run: bool = False) -> list[object]:
        passes[id(self.agent.storage)] += 1
        return await prune(self, dry_run=dry_run)  # type: ignore[return-value]

    monkeypatch.setattr(Pruner, "prune", counted)
    names = ["a", "b"]
    async with telegram_cluster(home, emulator_url, postgresql_database, redis_server.url, names) as cluster:
        by = {id(gateway.services.runtime.storage): name for name, gateway in cluster.gateways.items()}
        leader = await cluster.leader()
        await until(lambda: len(passes) > 0, SLACK, "the leader pruning")
        assert {by[key] for key in passes} == {leader}
        await cluster.close(leader)
        successor = await cluster.leader(LEADER_TTL + SLACK)
        await until(lambda: len(passes) == 2, SLACK, "the new leader pruning")
        assert {by[key] for key in passes} == {leader, successor}
