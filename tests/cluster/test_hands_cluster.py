"""In a cluster the answer to a held command may be given on any process: the decision lives in the
database, and the process whose turn waits learns it at once through the cluster's Redis (two gateways
on one PostgreSQL and one Redis, real python-telegram-bot, the emulator, a real command).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.approvals import service
from gateway.approvals.answers import Decider, answer_held
from gateway.home import HeraldHome
from resilience.backoff import Backoff
from tests.cluster_support import open_cluster
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.gateway_support import ADMIN
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(120)]


async def test_a_command_approved_on_another_process_runs_at_once(
    home: HeraldHome,
    emulator: ProviderEmulator,
    emulator_url: str,
    redis_server: RedisServer,
    postgresql_database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service, "POLL", Backoff(first=600.0, cap=600.0))  # only an announcement wakes it
    workspace = tmp_path / "ws"
    (workspace / "build" / "x").mkdir(parents=True)
    emulator.script(
        Reply(tool_calls=[ToolUse("terminal", {"command": "rm -rf build"})]), Reply(text="Cleaned.")
    )
    async with open_cluster(
        home,
        emulator,
        emulator_url,
        redis_url=redis_server.url,
        database_url=postgresql_database,
        count=2,
        agent={"toolsets": ["memory", "terminal", "files"]},
        tools={"workspace": str(workspace)},
    ) as cluster:
        cluster.fake.private_message(ADMIN, "clean the build")
        waiting = await cluster.wait_running()
        other = cluster.gateways[1 - waiting].services.approvals

        async def held() -> list[str]:
            return [row.code for row in await other.records.pending_in_chat("telegram", str(ADMIN))]

        [code] = await wait_until_awaited(held, what="the held command")
        owner = Decider("telegram", str(ADMIN), f"telegram:{ADMIN}", "Owner")
        told = await answer_held(other, owner, code, approve=True)
        await wait_until(lambda: cluster.answers(ADMIN)[-1:] == ["Cleaned."], what="the answer")

    assert told == "Approved once: rm -rf build."
    assert not (workspace / "build").exists()
