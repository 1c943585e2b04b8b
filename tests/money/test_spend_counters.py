"""The spend gate's bookkeeping: reserve before, settle after, with the figures in memory (one process)
or in Redis (a cluster), and the spending windows in the database on either backend."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence

import pytest

from agent.db.base import Storage
from agent.prompt import SystemPrompt
from agent.spending.charge import Charge, Limit, Scope, charging
from agent.spending.counters import LocalCounters, SpendKey
from agent.spending.gate import WARNED, Admission, OverBudget, SpendGate, SpendWarning
from agent.spending.windows import day_window, month_window
from agent.store import NewSession, SessionStore
from agent.usage import RequestUsage, Usage
from gateway.cluster.counting.spending import RedisCounters
from gateway.cluster.redis import open_redis
from gateway.timezones import resolve_timezone
from tests.redis_server import RedisServer

BERLIN = resolve_timezone("Europe/Berlin")
NOON = 1_773_486_000.0  # 2026-03-14 12:00 Europe/Berlin
DAY = day_window(NOON, BERLIN).id
MONTH = month_window(NOON, BERLIN).id
CHAT = Scope("chat", "telegram:dm:5", (Limit("day", 1.0),))
BOT = Scope("bot")


class Database:
    """What the database says each window spent (the counters' loader), and who was told."""

    def __init__(self) -> None:
        self.spent: dict[SpendKey, float] = {}
        self.loads = 0
        self.noted: set[tuple[str, str, str]] = set()

    async def load(self, keys: Sequence[SpendKey]) -> Mapping[SpendKey, float]:
        self.loads += 1
        return {key: self.spent[key] for key in keys if key in self.spent}

    async def note_once(self, scope: str, period: str, audience: str) -> bool:
        first = (scope, period, audience) not in self.noted
        self.noted.add((scope, period, audience))
        return first


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def gate_on(counters: LocalCounters | RedisCounters, database: Database) -> SpendGate:
    """A gate charging the bot and a chat with a $1.00 daily limit, at noon in Berlin."""
    return SpendGate(
        counters, database, zone=BERLIN, warn_at=0.8, default=Charge((BOT, CHAT)), clock=lambda: NOON
    )


async def settle(gate: SpendGate, admission: Admission, cost: float, database: Database) -> None:
    """What ModelCalls does after a request: the database counts it first, then the gate."""
    for key in admission.keys:
        database.spent[key] = database.spent.get(key, 0.0) + cost
    await gate.settle(admission, cost, {key: database.spent[key] for key in admission.keys})


async def test_requests_in_flight_count_until_their_cost_is_known() -> None:
    database = Database()
    gate = gate_on(LocalCounters(database.load, hold_ttl=60), database)
    first = await gate.admit(0.6)
    with pytest.raises(OverBudget) as refused:
        await gate.admit(0.6)  # 0.6 reserved + 0.6 > $1.00
    refusal = refused.value.refusal
    assert (refusal.scope.key, refusal.window.id) == (CHAT.key, DAY)
    assert (refusal.spent, refusal.reserved) == (0.0, 0.6)
    await settle(gate, first, 0.3, database)  # cheaper than estimated: the rest is free again
    second = await gate.admit(0.6)
    await gate.release(second)  # failed: nothing counted, nothing held
    assert (await gate.admit(0.7)).hold is not None
    assert database.loads == 1  # the figures stay in memory; the database was read once


async def test_a_reservation_whose_settle_never_comes_expires() -> None:
    database = Database()
    monotonic = Clock(100.0)
    gate = gate_on(LocalCounters(database.load, hold_ttl=30, clock=monotonic), database)
    await gate.admit(0.9)  # its process "died": never settled nor released
    with pytest.raises(OverBudget):
        await gate.admit(0.2)
    monotonic.now += 31
    await gate.admit(0.2)


async def test_exempt_requests_are_never_refused_but_counted() -> None:
    database = Database()
    gate = gate_on(LocalCounters(database.load, hold_ttl=60), database)
    with charging(Charge((BOT, CHAT), exempt=True)):
        admission = await gate.admit(5.0)
    assert admission.hold is None and (CHAT.key, DAY) in admission.keys
    await settle(gate, admission, 5.0, database)
    with pytest.raises(OverBudget):
        await gate.admit(0.01)  # the chat's spending counts for everyone else
    assert await gate.check(Charge((BOT, CHAT))) is not None
    assert await gate.check(Charge((BOT, CHAT), exempt=True)) is None


async def test_every_request_counts_in_its_scopes_day_and_month_and_unlimited_ones_cost_no_check() -> None:
    database = Database()
    gate = gate_on(LocalCounters(database.load, hold_ttl=60), database)
    with charging(Charge((BOT, Scope("person", "telegram:5")))):
        admission = await gate.admit(1000.0)  # no limit anywhere: admitted without looking
    assert set(admission.keys) == {("bot", DAY), ("bot", MONTH), ("person:telegram:5", DAY),
                                   ("person:telegram:5", MONTH)}  # fmt: skip
    assert admission.hold is None and database.loads == 0
    job = Scope("cron", "ab12", (Limit("run", 0.5),), run="r7")
    with charging(Charge((BOT, job))):
        run = await gate.admit(0.4)
    assert ("cron:ab12", "run:r7") in run.keys


async def test_the_admins_are_warned_once_per_scope_and_window() -> None:
    database = Database()
    gate = gate_on(LocalCounters(database.load, hold_ttl=60), database)
    heard: list[SpendWarning] = []

    async def listener(warning: SpendWarning) -> None:
        heard.append(warning)

    gate.on_warning(listener)
    for cost in (0.5, 0.25, 0.1, 0.1):  # crosses $0.80 on the third
        await settle(gate, await gate.admit(0.0), cost, database)
    assert [(w.scope.key, w.window.id, round(w.spent, 2)) for w in heard] == [(CHAT.key, DAY, 0.85)]
    assert (CHAT.key, DAY, WARNED) in database.noted


async def test_what_other_processes_spent_is_read_again_in_the_background() -> None:
    database = Database()
    monotonic = Clock(100.0)
    gate = gate_on(LocalCounters(database.load, hold_ttl=60, refresh=1.0, clock=monotonic), database)
    await gate.admit(0.5)
    database.spent[(CHAT.key, DAY)] = 0.95  # another process on the same database spent this meanwhile
    monotonic.now += 1.5
    await gate.release(await gate.admit(0.01))  # stale: starts a reload, does not wait for it
    async with asyncio.timeout(5):
        while database.loads < 2:  # noqa: ASYNC110 - the reload is a task of the counters
            await asyncio.sleep(0.01)
        while True:
            try:
                await gate.release(await gate.admit(0.01))
            except OverBudget as refused:
                assert refused.refusal.spent == pytest.approx(0.95)
                break
            await asyncio.sleep(0.01)
    await gate.aclose()


async def test_a_new_day_starts_from_nothing() -> None:
    database = Database()
    now = Clock(NOON)
    gate = SpendGate(LocalCounters(database.load, hold_ttl=60), database, zone=BERLIN, warn_at=None,
                     default=Charge((CHAT,)), clock=now)  # fmt: skip
    await settle(gate, await gate.admit(0.9), 1.0, database)
    assert await gate.check(Charge((CHAT,))) is not None
    now.now += 12 * 3600 + 1  # past midnight in Berlin
    assert await gate.check(Charge((CHAT,))) is None
    assert (await gate.admit(0.9)).keys[0] == (CHAT.key, day_window(now.now, BERLIN).id)


# -- the windows in the database (both backends) ---------------------------------------------


async def test_a_requests_cost_is_added_to_its_windows_with_its_usage_row(storage: Storage) -> None:
    store = SessionStore(storage)
    prompt = SystemPrompt(stable="s", context="", volatile="v")
    await store.sessions.create(NewSession(id="s1", session_key="telegram:dm:5", source="telegram",
                                          platform="telegram", system_prompt=prompt, tools_json="[]",
                                          provider="anthropic", model="m"))  # fmt: skip
    request = RequestUsage("turn", "anthropic", "m", Usage(input_tokens=10), cost=0.25, uncached_cost=0.3)
    keys = [("bot", DAY), ("chat:telegram:dm:5", DAY), ("bot", MONTH)]
    assert (await store.usage.record("s1", request, spend=keys)).spent == dict.fromkeys(keys, 0.25)
    recorded = await store.usage.record("s1", request, spend=[("bot", DAY), ("bot", DAY)])  # once each
    assert recorded.spent == {("bot", DAY): 0.5}
    ledger = store.spending
    assert await ledger.spent([*keys, ("person:x", DAY)]) == {
        ("bot", DAY): 0.5, ("chat:telegram:dm:5", DAY): 0.25, ("bot", MONTH): 0.25,
    }  # fmt: skip
    rows = await ledger.in_periods([DAY])
    assert [(row.scope, row.spent, row.requests) for row in rows] == [
        ("bot", 0.5, 2), ("chat:telegram:dm:5", 0.25, 1),
    ]  # fmt: skip
    assert await ledger.note_once("bot", DAY, "admins")
    assert not await ledger.note_once("bot", DAY, "admins")
    assert await ledger.note_once("bot", MONTH, "admins")
    assert await ledger.spent([]) == {}


# -- the cluster's figures in Redis --------------------------------------------------------------


@pytest.fixture
async def two_processes(redis_server: RedisServer) -> AsyncIterator[tuple[Database, SpendGate, SpendGate]]:
    """Two gates on one Redis, as two processes of a cluster would have."""
    database = Database()
    async with open_redis(redis_server.url) as one, open_redis(redis_server.url) as other:
        yield (
            database,
            gate_on(RedisCounters(one, database.load, hold_ttl=60), database),
            gate_on(RedisCounters(other, database.load, hold_ttl=0.3), database),
        )


async def test_processes_of_a_cluster_reserve_against_the_same_figures(
    two_processes: tuple[Database, SpendGate, SpendGate],
) -> None:
    database, one, other = two_processes
    database.spent[(CHAT.key, DAY)] = 0.2  # spent before Redis knew the window: seeded from here
    first = await one.admit(0.5)
    with pytest.raises(OverBudget) as refused:
        await other.admit(0.5)  # 0.2 spent + 0.5 in flight elsewhere + 0.5 > $1.00
    refusal = refused.value.refusal
    assert refusal.spent == pytest.approx(0.2) and refusal.reserved == pytest.approx(0.5)
    await settle(one, first, 0.1, database)
    second = await other.admit(0.5)  # 0.3 spent now
    with pytest.raises(OverBudget):
        await one.admit(0.3)
    await other.release(second)
    await one.admit(0.3)


async def test_many_requests_at_once_over_two_processes_never_reserve_past_the_limit(
    two_processes: tuple[Database, SpendGate, SpendGate],
) -> None:
    _, one, other = two_processes
    outcomes = await asyncio.gather(
        *((one if index % 2 else other).admit(0.3) for index in range(10)), return_exceptions=True
    )
    admitted = [o for o in outcomes if isinstance(o, Admission)]
    assert len(admitted) == 3  # 3 × $0.30 fit under $1.00, a fourth would not
    assert all(isinstance(o, OverBudget) for o in outcomes if not isinstance(o, Admission))


async def test_a_dead_processes_reservation_lapses_in_redis_time(
    two_processes: tuple[Database, SpendGate, SpendGate],
) -> None:
    _, one, short_lived = two_processes
    await short_lived.admit(0.9)  # reserved for 0.3 s and never settled
    deadline = time.monotonic() + 10
    while True:
        try:
            await one.admit(0.5)
            break
        except OverBudget:
            assert time.monotonic() < deadline, "the dead reservation never lapsed"
            await asyncio.sleep(0.05)


async def test_a_window_redis_lost_is_seeded_again_from_the_database(
    two_processes: tuple[Database, SpendGate, SpendGate], redis_server: RedisServer
) -> None:
    database, one, _ = two_processes
    await settle(one, await one.admit(0.5), 0.5, database)
    redis_server.restart()  # empty when it is back
    with pytest.raises(OverBudget) as refused:
        await one.admit(0.6)
    assert refused.value.refusal.spent == pytest.approx(0.5)  # read from the database again
    await one.admit(0.4)
