"""Slack in a cluster: one process holds the Socket Mode connection, elected like Telegram polling (two
gateways on one PostgreSQL, one Redis and one fake Slack, in one event loop). When it stops, the other
connects within ``cluster.leader_ttl`` and reads back what was sent while nobody was connected (from
the cursors the first one stored, and in a DM that has none yet, from when the first one connected):
answered once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest

from gateway.app import Gateway, open_gateway
from gateway.home import HeraldHome
from tests.cluster_leader_support import LEADER_TTL, SETTLE_TIMEOUT, SLACK, LeaseCalls, until
from tests.conformance.harness import gateway_settings, user_texts
from tests.conformance.slack_driver import SlackDriver
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.slow, pytest.mark.timeout(180)]


class SlackCluster:
    """Gateways of one cluster on the driver's fake Slack; :meth:`stop` stops one as SIGTERM would."""

    def __init__(self, driver: SlackDriver) -> None:
        self.driver = driver
        self.gateways: dict[str, Gateway] = {}
        self.stacks: dict[str, AsyncExitStack] = {}

    def leaders(self) -> list[str]:
        return [name for name, g in self.gateways.items() if g.cluster and g.cluster.leadership.leading]

    async def stop(self, name: str) -> None:
        del self.gateways[name]
        await self.stacks.pop(name).aclose()

    async def settled(self) -> None:
        """Every envelope acknowledged, every stored message answered, every reply sent."""
        await self.driver.fake.wait_for(lambda: self.driver.fake.unacked() == 0, what="envelopes acked")
        services = next(iter(self.gateways.values())).services
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while await services.inbox.pending() or await services.outbox.pending_count() or any(
            g.services.lanes.depth for g in self.gateways.values()
        ):
            assert time.monotonic() < deadline, "the cluster did not settle"
            await asyncio.sleep(0.05)


@asynccontextmanager
async def slack_cluster(
    driver: SlackDriver, home: HeraldHome, emulator_url: str, database_url: str, redis_url: str,
    names: list[str],
) -> AsyncIterator[SlackCluster]:  # fmt: skip
    async with driver.serving() as section, AsyncExitStack() as outer:
        cluster = SlackCluster(driver)
        for name in names:
            config = make_config(
                emulator_url, "anthropic", storage={"url": database_url}, gateway=gateway_settings(driver),
                cluster={"redis_url": redis_url, "instance_id": name, "leader_ttl": LEADER_TTL},
                slack=section,
            )  # fmt: skip
            stack = AsyncExitStack()
            outer.push_async_callback(stack.aclose)  # a no-op once stop() closed it
            cluster.stacks[name] = stack
            cluster.gateways[name] = await stack.enter_async_context(
                open_gateway(config, home, environ=driver.environ())
            )
        yield cluster


async def test_one_gateway_holds_the_socket_and_the_other_takes_it_over_when_it_stops(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, postgresql_database: str,
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The leader's socket is taken over when it stops: it releases the leader lease and the other
    wins it at its next try (not after the lease's TTL), then opens its own socket."""
    driver = SlackDriver()
    leases = LeaseCalls.record(monkeypatch)
    fake, place, admin = driver.fake, driver.dm_place(driver.friend), driver.dm_place(driver.admin)
    async with slack_cluster(
        driver, home, emulator_url, postgresql_database, redis_server.url, ["a", "b"]
    ) as cluster:
        await until(lambda: len(cluster.leaders()) == 1 and fake.live(), LEADER_TTL + SLACK, "a socket")
        [first] = cluster.leaders()
        driver.dm(driver.friend, "before the handover")
        await cluster.settled()
        leader = cluster.gateways[first].cluster
        assert leader is not None and fake.connections >= 1
        # the other process never led, so never connected (the leader itself may have replaced a socket
        # that seemed silent on a loaded machine: the fake cannot tell whose a connection is)
        assert leases.winners(leader.leadership.key) == {first}
        fake.hold("apps.connections.open")  # the other's socket waits until the gap's message was sent
        await cluster.stop(first)
        await until(lambda: not fake.live(), SLACK, "the leader's socket closed")
        opened = fake.calls_to  # the second apps.connections.open is the other's
        await until(lambda: len(opened("apps.connections.open")) == 2, LEADER_TTL + SLACK, "the other's turn")
        driver.dm(driver.friend, "during the handover")  # into no socket: Slack drops the event
        driver.dm(driver.admin, "a first word while nobody listened")  # a DM with no stored cursor yet
        fake.release("apps.connections.open")
        await until(lambda: fake.live(), SLACK, "the other's socket")
        [second] = cluster.leaders()
        assert second != first
        member = cluster.gateways[second].cluster
        assert member is not None
        leases.assert_handed_over(member.leadership.key, first, second)
        await until(lambda: len(driver.messages(place)) == 2, SETTLE_TIMEOUT, "the gap's message answered")
        await until(lambda: len(driver.messages(admin)) == 1, SETTLE_TIMEOUT, "the first DM answered")
        driver.dm(driver.friend, "after the handover")
        await cluster.settled()
        answers, first_dm = driver.messages(place), driver.messages(admin)
    said = [user_texts(request)[-1] for request in emulator.requests]
    for text in ("before the handover", "during the handover", "a first word", "after the handover"):
        assert sum(text in line for line in said) == 1, (text, said)  # nothing lost, nothing doubled
    assert len(answers) == 3 and len(first_dm) == 1 and len(said) == 4
    assert fake.connections >= 2  # the other's socket (and a new one of its own if a loaded machine made
    # it replace one that seemed silent; two processes at once are ruled out above, while both ran)
