"""One gateway per home: a second ``herald gateway run`` on the same HERALD_HOME is refused at start.

Two gateways on one home both polled Telegram (409 conflicts), both sent each reply of the outbox and
both ran each cron job. Now the second one stops before it opens anything, naming the first; the first
goes on as if nothing had happened, and once it stops a gateway starts again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.files import LockHeld, take_lock
from gateway.app import open_gateway
from gateway.failures import AlreadyRunning
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.fakes.waiting import PROCESS_TIMEOUT
from tests.gateway.test_gateway_crash import CHAT, configure, gateway_process
from tests.gateway_support import FRIEND, gateway_config, telegram_gateway


def refusal(pid: int, home: HeraldHome) -> str:
    return (
        f"Another gateway (pid {pid}) is running on {home.root}: stop it first, give each gateway its own "
        "HERALD_HOME, or run several as a cluster on PostgreSQL (cluster.redis_url); two on one home would "
        "both answer every message and run every cron job."
    )


async def test_a_second_gateway_on_one_home_is_refused_and_the_first_goes_on_answering(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Still here."), Reply(text="Back again."))
    fake = FakeTelegram()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as first:
        introductions = len(fake.calls_to("getMe"))
        second = gateway_config(emulator_url, fake.base_url)
        with pytest.raises(AlreadyRunning) as refused:
            async with open_gateway(second, home, environ={"TELEGRAM_BOT_TOKEN": fake.token}):
                pass
        assert str(refused.value) == refusal(os.getpid(), home)  # two open files of one process here
        fake.private_message(FRIEND, "are you there?")
        await first.settled()
        assert first.texts(FRIEND) == ["Still here."]
        assert len(fake.calls_to("getMe")) == introductions  # the second never spoke to Telegram
        assert fake.poll_overlaps == []
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as again:  # the first stopped
        fake.private_message(FRIEND, "and now?")
        await again.settled()
        assert again.texts(FRIEND) == ["Still here.", "Back again."]


@pytest.mark.slow
def test_gateway_run_beside_a_running_gateway_exits_2_naming_its_pid(
    emulator: ProviderEmulator, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTelegram()
    with emulator.serve_in_thread() as provider, fake.serve_in_thread() as telegram:
        configure(home, provider, telegram)
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake.token)
        with gateway_process(home, fake) as first:
            fake.wait_for_sync(lambda: fake.calls_to("getUpdates"), PROCESS_TIMEOUT, what="it polling")
            result = herald("gateway", "run")
            assert (result.returncode, result.stdout) == (2, ""), result
            assert result.stderr == f"herald: {refusal(first.pid, home)}\n"
            fake.private_message(CHAT, "still there?")  # the first gateway still answers
            fake.wait_for_sync(lambda: fake.messages(CHAT), PROCESS_TIMEOUT, what="its answer")
            assert first.poll() is None and fake.poll_overlaps == []


def test_a_lock_names_its_holders_and_is_free_once_they_close(tmp_path: Path) -> None:
    path = tmp_path / "gateway.lock"
    shared = [take_lock(path, exclusive=False) for _ in range(2)]  # readers share it
    with pytest.raises(LockHeld) as held:
        take_lock(path, exclusive=True)
    assert held.value.holders == [os.getpid()]
    for fd in shared:
        os.close(fd)
    alone = take_lock(path, exclusive=True)
    with pytest.raises(LockHeld):
        take_lock(path, exclusive=False)
    os.close(alone)
    os.close(take_lock(path, exclusive=False))
