"""One turn at a time per session, everywhere: in a process, across processes, after a crash."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from agent.locks import DatabaseSessionLocks, LocalSessionLocks, LockNotHeld, LockTimeout, owner_alive
from agent.store.leases import SessionLeases
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import PROCESS_TIMEOUT, WAIT_TIMEOUT, wait_until
from tests.helpers import new_session, run_turn


async def test_two_turns_on_one_session_run_one_after_the_other(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.stream_delay = 0.01  # long enough for the two turns to overlap if nothing stopped them
    emulator.script(Reply(text_tokens=120), Reply(text_tokens=120))
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        first, second = await asyncio.gather(
            run_turn(runtime, session, "first question"), run_turn(runtime, session, "second question")
        )
        history = await runtime.store.messages.load(session.id)
    assert first.error is None and second.error is None
    assert [(m.role, m.content[:15]) for m in history] == [
        ("user", "first question"),
        ("assistant", first.text[:15]),
        ("user", "second question"),
        ("assistant", second.text[:15]),
    ]
    assert emulator.max_in_flight == 1


async def test_the_agent_refuses_to_work_without_the_sessions_lease(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        async with runtime.locks.hold("some other chat") as lease:
            with pytest.raises(LockNotHeld):
                await runtime.agent.run_turn(lease, session, "hello")
        with pytest.raises(LockNotHeld):  # a lease is only valid inside its block
            await runtime.agent.compress(lease, session)
    assert emulator.requests == []


async def test_local_locks_serve_waiters_in_order_and_forget_idle_keys() -> None:
    locks = LocalSessionLocks()
    order: list[int] = []
    asked: list[int] = []

    async def worker(number: int) -> None:
        asked.append(number)  # and in the same step it queues for the lock
        async with locks.hold("chat"):
            order.append(number)
            await asyncio.sleep(0)

    async with locks.hold("chat"):
        tasks = [asyncio.create_task(worker(n)) for n in range(5)]
        await wait_until(lambda: len(asked) == 5, what="five waiters")
        assert locks.active_keys == 1 and order == []
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4] and locks.active_keys == 0
    async with locks.hold("chat"):
        with pytest.raises(LockTimeout):
            async with locks.hold("chat", max_wait=0.05):
                pass


async def test_a_lease_holds_across_database_connections_and_is_released(
    tmp_path: Path, database_url: str | None
) -> None:
    """Two connections to one database behave like two processes (on PostgreSQL: on two machines)."""
    url = parse_storage_url(database_url, tmp_path / "state.db")
    async with open_storage(url) as storage_a, open_storage(url) as storage_b:
        locks_a = DatabaseSessionLocks(SessionLeases(storage_a))
        locks_b = DatabaseSessionLocks(SessionLeases(storage_b))
        told: list[str] = []
        try:
            async with locks_a.hold("cli:local"):
                with pytest.raises(LockTimeout, match="busy in another process"):
                    async with locks_b.hold("cli:local", max_wait=0.3, on_wait=told.append):
                        pass
                assert told == [locks_a.owner]
            async with locks_b.hold("cli:local", max_wait=WAIT_TIMEOUT):  # free again
                pass
        finally:
            await locks_a.aclose()
            await locks_b.aclose()


async def migrated(home: HeraldHome) -> None:
    async with open_home_storage(home):
        pass


def exited_pid() -> int:
    """The pid of a process that has run and exited."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(child.stdout)


async def test_a_dead_owners_lease_is_taken_over_at_once(storage: Storage) -> None:
    leases = SessionLeases(storage)
    locks = DatabaseSessionLocks(leases)
    try:
        assert await leases.take("cli:local", f"{socket.gethostname()}:{exited_pid()}:dead", 3600) is None
        async with locks.hold("cli:local", max_wait=WAIT_TIMEOUT):  # at once, not in an hour
            assert await leases.holder("cli:local") == locks.owner
        assert await leases.take("other", "elsewhere:1:x", 0.3) is None  # trusted until it expires
        started = time.monotonic()
        async with locks.hold("other", max_wait=WAIT_TIMEOUT):
            assert time.monotonic() - started >= 0.2
    finally:
        await locks.aclose()


def test_owner_alive_reads_host_and_pid() -> None:
    host = socket.gethostname()
    assert owner_alive(f"{host}:{os.getpid()}:me")
    assert owner_alive("another-host:1:x")
    assert owner_alive("garbage")
    assert not owner_alive(f"{host}:{exited_pid()}:gone")


@pytest.mark.slow
def test_five_processes_continuing_one_chat_take_turns(emulator: ProviderEmulator, home: HeraldHome) -> None:
    """Five `herald chat -q --continue` at once: each answered, one after another, history in order."""
    from gateway.config import set_value

    asyncio.run(migrated(home))  # as after a first run (several first starts at once: test_storage)
    emulator.stream_delay = 0.02  # each answer streams for about half a second
    with emulator.serve_in_thread() as url:
        set_value(home.config_path, "model.base_url", url)
        env = {**os.environ, "HERALD_HOME": str(home.root)}
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "gateway", "chat", "-q", f"message {n}", "--continue"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(5)
        ]
        outputs = [process.communicate(timeout=PROCESS_TIMEOUT) for process in processes]
    assert [p.returncode for p in processes] == [0] * 5, [err for _, err in outputs]
    assert all(out.startswith("Emulated reply") for out, _ in outputs)
    assert emulator.max_in_flight == 1  # never two turns of the chat at once
    last = emulator.requests[-1].json["messages"]
    roles = [m["role"] for m in last]
    assert roles == ["user", "assistant"] * 4 + ["user"]
    users = [m["content"][0]["text"] for m in last if m["role"] == "user"]
    assert sorted(users) == [f"message {n}" for n in range(5)]
    answers = [m["content"][0]["text"] for m in last if m["role"] == "assistant"]
    assert [a.split(": ", 1)[1][:9] for a in answers] == users[:4]  # each answer follows its question


async def test_a_holder_whose_lease_was_taken_over_is_stopped(storage: Storage) -> None:
    """A holder that stalled past its lease while another process took the session over must not
    go on working beside the new holder."""
    leases = SessionLeases(storage)
    locks = DatabaseSessionLocks(leases, lease_seconds=0.3)
    reached_the_end = False

    async def long_turn() -> None:
        nonlocal reached_the_end
        async with locks.hold("cli:local"):
            # another process takes the lease over (it found this one stalled past its expiry)
            assert await leases.take("cli:local", "elsewhere:1:x", 60, gone=lambda _: True) is None
            await asyncio.sleep(3600)  # stopped by the next renewal, a tenth of a second later
            reached_the_end = True

    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(long_turn(), WAIT_TIMEOUT)
        assert not reached_the_end
        assert await leases.holder("cli:local") == "elsewhere:1:x"  # the new holder's is left alone
    finally:
        await locks.aclose()
