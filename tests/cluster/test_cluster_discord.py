"""Discord in a cluster: the gateway's shards are leases spread over the processes (each holds at most
its share), every process sends through REST, and a shard whose holder stops or cannot renew is
taken over within the lease's TTL — never two connections for one shard at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from adapters.base import Adapter
from adapters.discord.adapter import DiscordAdapter
from adapters.discord.interaction_records import RECORDS
from adapters.discord.spec import SPEC as DISCORD
from agent.db.base import Storage
from gateway.app import Gateway, open_gateway
from gateway.cluster.leases.shards import ShardKeeper
from gateway.cluster.member import ClusterMember
from gateway.home import HeraldHome
from gateway.platforms.records import StoredRecords
from tests.cluster_leader_support import LEADER_TTL, SLACK, cut_off, hang, until
from tests.conftest import make_config
from tests.fakes import FakeDiscord
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(120)]  # PostgreSQL whatever --storage says

FRIEND = 1002
FAST: dict[str, Any] = {"identify_delay": 0.0, "guild_ready_timeout": 0.05, "start_timeout": 5.0}


@dataclass
class DiscordCluster:
    fake: FakeDiscord
    channels: dict[int, int]  # shard id -> a channel of a guild on that shard
    gateways: dict[str, Gateway] = field(default_factory=dict)
    stacks: dict[str, AsyncExitStack] = field(default_factory=dict)

    def keeper(self, name: str) -> ShardKeeper:
        member: ClusterMember | None = self.gateways[name].cluster
        assert member is not None
        [keeper] = member.shards  # Discord's
        return keeper

    def held(self) -> dict[str, list[int]]:
        return {name: sorted(self.keeper(name).held()) for name in self.gateways}

    async def close(self, name: str) -> None:
        del self.gateways[name]
        await self.stacks.pop(name).aclose()

    async def ask(self, shard_id: int, text: str) -> None:
        """Mention the bot in the shard's channel and wait for one answer there."""
        channel = self.channels[shard_id]
        before = len(self.fake.messages(channel))
        self.fake.guild_message(channel, FRIEND, text, mention_bot=True)
        await until(lambda: len(self.fake.messages(channel)) > before, 15.0, f"an answer on shard {shard_id}")


@asynccontextmanager
async def discord_cluster(
    home: HeraldHome,
    emulator_url: str,
    database_url: str,
    redis_url: str,
    names: list[str],
    *,
    shards: int,
    configured: bool,
) -> AsyncIterator[DiscordCluster]:
    fake = FakeDiscord()
    fake.add_user(FRIEND, "friend")
    channels: dict[int, int] = {}
    for shard_id in range(shards):
        guild = fake.add_guild(f"guild {shard_id}", guild_id=((1000 + shard_id) << 22) + shard_id)
        channels[shard_id] = fake.add_text_channel(guild, "general")
    fake.recommended_shards = shards
    async with fake.serve(), AsyncExitStack() as outer:
        cluster = DiscordCluster(fake, channels)
        for name in names:
            config = make_config(
                emulator_url,
                storage={"url": database_url},
                cluster={"redis_url": redis_url, "instance_id": name, "leader_ttl": LEADER_TTL},
                gateway={"http_port": 0, "stream_edit_interval": 0},
                discord={
                    "allowed_users": [FRIEND],
                    "api_base": fake.rest_url,
                    "gateway_url": fake.gateway_url,
                    "shard_count": shards if configured else None,
                },
            )

            def adapters(storage: Storage, config: Any = config) -> list[Adapter]:
                discord = config.platform_settings(DISCORD)
                return [
                    DiscordAdapter(
                        fake.token, api_base=discord.api_base, gateway_url=discord.gateway_url,
                        records=StoredRecords(storage, DISCORD.name, RECORDS),
                        shard_count=discord.shard_count, **FAST,
                    )
                ]  # fmt: skip

            stack = AsyncExitStack()
            outer.push_async_callback(stack.aclose)
            cluster.stacks[name] = stack
            cluster.gateways[name] = await stack.enter_async_context(
                open_gateway(config, home, adapters=adapters)
            )
        yield cluster


async def test_shards_spread_over_the_processes_and_move_when_one_stops(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer
) -> None:
    async with discord_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b"], shards=2, configured=False
    ) as cluster:
        fake = cluster.fake
        await until(
            lambda: sorted(s for held in cluster.held().values() for s in held) == [0, 1],
            LEADER_TTL + SLACK,
            "both shards",
        )
        await until(
            lambda: all(len(h) == 1 for h in cluster.held().values()), 3 * LEADER_TTL + SLACK, "one each"
        )
        await until(lambda: fake.live_shards() == [(0, 2), (1, 2)], SLACK, "both shards connected")
        for shard_id in (0, 1):
            await cluster.ask(shard_id, f"hello on shard {shard_id}")
        for name, held in cluster.held().items():  # what /readyz shows of each
            member = cluster.gateways[name].cluster
            assert member is not None and f"discord shard {held[0]}/2" in member.leases()
        holder = next(name for name, held in cluster.held().items() if held == [1])
        other = next(name for name in cluster.gateways if name != holder)
        await cluster.close(holder)  # it closes its shard and releases the lease
        await until(lambda: cluster.held() == {other: [0, 1]}, LEADER_TTL + SLACK, "the shard taken over")
        await until(lambda: fake.live_shards() == [(0, 2), (1, 2)], SLACK, "both shards connected again")
        await cluster.ask(1, "still there?")
        for shard_id, channel in cluster.channels.items():
            bot = [m for m in fake.messages(channel) if m.author_id == fake.bot_id]
            assert len(bot) == (2 if shard_id == 1 else 1)  # each question answered once
    assert fake.shard_overlaps() == []
    assert {tuple(p["shard"]) for p in fake.identify_payloads} == {(0, 2), (1, 2)}


async def test_a_shard_whose_holder_cannot_renew_is_taken_over_after_its_lease(
    home: HeraldHome, emulator_url: str, postgresql_database: str, redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    async with discord_cluster(
        home, emulator_url, postgresql_database, redis_server.url, ["a", "b"], shards=2, configured=True
    ) as cluster:
        fake = cluster.fake
        await until(
            lambda: all(len(h) == 1 for h in cluster.held().values()), 3 * LEADER_TTL + SLACK, "one each"
        )
        stalled = next(name for name, held in cluster.held().items() if held == [1])
        other = next(name for name in cluster.gateways if name != stalled)
        keeper = cluster.keeper(stalled)
        cut_off(monkeypatch, stalled)  # cut off from Redis: its shard's renewals hang
        for script in ("_heartbeat", "_leave"):
            monkeypatch.setattr(keeper, script, hang)
        await until(lambda: keeper.held() == {}, LEADER_TTL, "the stalled holder closing its shard")
        await until(lambda: cluster.held()[other] == [0, 1], LEADER_TTL + SLACK, "the shard taken over")
        await until(lambda: fake.live_shards() == [(0, 2), (1, 2)], SLACK, "both shards connected")
        await cluster.ask(1, "who answers now?")
    assert fake.shard_overlaps() == []
