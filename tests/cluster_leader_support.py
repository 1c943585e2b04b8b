"""Several gateways of one cluster in one event loop: one PostgreSQL, one Redis, one fake Telegram.

Each gateway is a whole ``open_gateway`` with its own ``cluster.instance_id``; they share the home (as
processes on one host do) and the fakes. ``Cluster.close(name)`` stops one as SIGTERM would.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.app import Gateway, open_gateway
from gateway.cluster.leases.lease import RedisLease
from gateway.cluster.member import ClusterMember
from gateway.home import HeraldHome
from tests.fakes import FakeTelegram
from tests.gateway_support import gateway_config

LEADER_TTL = 10.0  # not the default 3 s: a leader stalled by a loaded machine for less than 5 s stays leader
SLACK = 10.0  # on top of a TTL, for a loaded machine
SETTLE_TIMEOUT = 90.0  # a bound on waiting for a state: generous costs nothing when all is well
USERS = list(range(100, 400))  # allowed Telegram users, one private chat each


@dataclass
class Cluster:
    fake: FakeTelegram
    gateways: dict[str, Gateway] = field(default_factory=dict)
    _stacks: dict[str, AsyncExitStack] = field(default_factory=dict)

    def member(self, name: str) -> ClusterMember:
        member = self.gateways[name].cluster
        assert member is not None
        return member

    def leaders(self) -> list[str]:
        return [name for name in self.gateways if self.member(name).leadership.leading]

    async def leader(self, timeout: float = LEADER_TTL + SLACK) -> str:  # noqa: ASYNC109
        """The one leader, once there is one."""
        await until(lambda: len(self.leaders()) == 1, timeout, "a leader")
        [name] = self.leaders()
        return name

    async def close(self, name: str) -> None:
        """Stop ``name`` gracefully (drain, resign, close)."""
        del self.gateways[name]
        await self._stacks.pop(name).aclose()

    async def settled(self, timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: ASYNC109
        """Every update confirmed, every stored message answered, every reply sent."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            any_gateway = next(iter(self.gateways.values())).services
            if (
                not self.fake.pending_updates()
                and all(g.services.lanes.depth == 0 for g in self.gateways.values())
                and not await any_gateway.inbox.pending()
                and await any_gateway.outbox.pending_count() == 0
            ):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the cluster did not settle in {timeout}s:\n{self.fake.describe()}")

    def bot_messages(self, chat_id: int) -> list[str]:
        return [m.text for m in self.fake.messages(chat_id) if not m.deleted]


async def until(condition: Callable[[], bool], timeout: float, what: str) -> float:  # noqa: ASYNC109
    """Wait for ``condition``; returns the seconds it took."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - began


def cluster_config(
    emulator_url: str, base_url: str, database_url: str, redis_url: str, instance_id: str, **sections: Any
) -> Any:
    cluster = {"redis_url": redis_url, "instance_id": instance_id, "leader_ttl": LEADER_TTL}
    cluster.update(sections.pop("cluster", {}))
    telegram = {"allowed_users": USERS, **sections.pop("telegram", {})}
    return gateway_config(
        emulator_url, base_url, storage={"url": database_url}, cluster=cluster, telegram=telegram, **sections
    )


@asynccontextmanager
async def telegram_cluster(
    home: HeraldHome,
    emulator_url: str,
    database_url: str,
    redis_url: str,
    names: list[str],
    *,
    fake: FakeTelegram | None = None,
    **sections: Any,
) -> AsyncIterator[Cluster]:
    """``names`` gateways of one cluster, started one after another, against one fake Telegram."""
    fake = fake or FakeTelegram()
    async with fake.serve() as base_url, AsyncExitStack() as outer:
        cluster = Cluster(fake)
        for name in names:
            config = cluster_config(emulator_url, base_url, database_url, redis_url, name, **sections)
            stack = AsyncExitStack()
            outer.push_async_callback(stack.aclose)  # a no-op once Cluster.close closed it
            cluster._stacks[name] = stack
            cluster.gateways[name] = await stack.enter_async_context(
                open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": fake.token})
            )
        yield cluster


async def hang(*_: object, **__: object) -> Any:
    """A Redis command that never gets an answer."""
    await asyncio.Event().wait()


def cut_off(monkeypatch: pytest.MonkeyPatch, instance_id: str) -> None:
    """From now on the commands on ``instance_id``'s leader, shard and review leases hang, as across a
    partition between that process and Redis (its other connections go on)."""
    for name in ("take", "renew", "release"):
        command = getattr(RedisLease, name)

        async def partitioned(lease: RedisLease, *args: Any, command: Any = command, **kwargs: Any) -> Any:
            if lease.value.startswith(f"{instance_id}/"):
                await hang()
            return await command(lease, *args, **kwargs)

        monkeypatch.setattr(RedisLease, name, partitioned)


@dataclass
class LeaseCall:
    """One ``take`` or ``release`` of a lease by a process, numbered when it was sent and when it
    returned (the processes share one event loop, so the numbers order them)."""

    op: str
    key: str
    holder: str  # the process's name
    sent: int
    returned: int = -1  # -1: not yet
    succeeded: bool = False  # take: won; release: deleted the caller's own lease


@dataclass
class LeaseCalls:
    """Every ``take`` and ``release`` of every lease from :meth:`record` on: how a lease changed hands
    (handed over, or waited out), whatever the machine's speed."""

    calls: list[LeaseCall] = field(default_factory=list)
    _count: Iterator[int] = field(default_factory=itertools.count)

    @classmethod
    def record(cls, monkeypatch: pytest.MonkeyPatch) -> LeaseCalls:
        recorded = cls()
        for op in ("take", "release"):
            command = getattr(RedisLease, op)

            async def call(
                lease: RedisLease, *args: Any, command: Any = command, op: str = op, **kwargs: Any
            ) -> Any:
                entry = LeaseCall(op, lease.key, lease.value.split("/")[0], next(recorded._count))
                recorded.calls.append(entry)
                result = await command(lease, *args, **kwargs)
                entry.returned = next(recorded._count)
                entry.succeeded = result is None if op == "take" else bool(result)
                return result

            monkeypatch.setattr(RedisLease, op, call)
        return recorded

    def winners(self, key: str) -> set[str]:
        """The processes that won lease ``key`` at least once so far."""
        return {c.holder for c in self.calls if c.key == key and c.op == "take" and c.succeeded}

    def assert_handed_over(self, key: str, old: str, new: str) -> None:
        """``old`` released lease ``key`` and ``new`` won it at its first try after that: the takeover
        did not wait for the lease to expire, and came at the next of the campaign's tries (every
        ``ttl/3`` at most), however long the machine took to get there."""
        calls = [c for c in self.calls if c.key == key and c.returned >= 0]
        releases = [c for c in calls if c.op == "release" and c.holder == old]
        assert releases and releases[-1].succeeded, f"{old} did not release {key} (it was left to expire)"
        released = releases[-1]
        takes = [c for c in calls if c.op == "take" and c.holder == new]
        win = next((c for c in takes if c.succeeded and c.returned > released.sent), None)
        assert win is not None, f"{new} did not win {key} after {old} released it"
        lost = [c for c in takes if released.returned < c.sent < win.sent]
        assert lost == [], f"{new} tried {len(lost)} time(s) in vain after {old} released {key}"
