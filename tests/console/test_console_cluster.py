"""The console in a cluster (two gateway processes, one PostgreSQL, one Redis): the health page shows
the processes and the leader as Redis knows them, a login made on one process is good on the other,
a link made anywhere logs in anywhere, failed logins are counted (and slowed) over the cluster, and
every process shows what the whole cluster spent."""

from __future__ import annotations

import asyncio
import re

import pytest

from gateway.budgets.lines import usd
from gateway.console.attempts import LONGEST_DELAY
from gateway.console.links import LoginLinks
from gateway.console.server import CONSOLE_WEB
from gateway.home import HeraldHome
from tests.cluster_support import open_cluster
from tests.console.test_console_sources import row_of
from tests.console_support import CONSOLE_TOKEN, HeldBack, console_client
from tests.emulator import ProviderEmulator
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(120)]  # PostgreSQL whatever --storage says

LEADER = re.compile(r"<dt>Leader</dt><dd>(g[01])</dd>")


async def test_the_console_of_a_cluster(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    postgresql_database: str,
    redis_server: RedisServer,
) -> None:
    environ = {"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=2,
        environ=environ,
    ) as cluster:  # fmt: skip
        first, second = (gateway.http.url for gateway in cluster.gateways)
        async with console_client(first) as client:
            await client.login()
            async with asyncio.timeout(30):  # until a process has won the leader lease
                while not LEADER.search(page := (await client.get("/console/health"))[1]):  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            leader = LEADER.search(page).group(1)  # type: ignore[union-attr]
            rows = re.findall(r'<tr><td class="name">(g[01])</td><td>host [^<]+</td><td>(\w+)</td>', page)
            assert dict(rows) == {"g0": "leader" if leader == "g0" else "worker",
                                  "g1": "leader" if leader == "g1" else "worker"}  # fmt: skip
            assert "Queue lag" in page and "redis" in page

            cookies = {cookie.key: cookie.value for cookie in client.session.cookie_jar}
        async with console_client(second) as other:  # the first process's login, on the second
            other.session.cookie_jar.update_cookies({"herald_console": cookies["herald_console"]})
            status, page, _ = await other.get("/console/health")
            assert status == 200 and "Cluster and health" in page

        secret = await LoginLinks(cluster.gateways[0].services.runtime.storage).issue("telegram:1")
        async with console_client(second) as browser:  # a link made through the first, on the second
            await browser.login_with_link(secret)
            assert (await browser.get("/console/chats"))[0] == 200

        held = [HeldBack(), HeldBack()]  # each process's failed logins, on virtual time
        for gateway, sleep in zip(cluster.gateways, held, strict=True):
            gateway.http.mounted["/console"][CONSOLE_WEB].attempts.sleep = sleep
        async with console_client(first) as guesser, console_client(second) as owner:
            for _ in range(10):
                form = await guesser.csrf("/console/login")
                status, _, _ = await guesser.post("/console/login", {"csrf": form, "token": "guess"})
                assert status == 401
            form = await owner.csrf("/console/login")  # the same address, on the other process
            status, _, _ = await owner.post("/console/login", {"csrf": form, "token": "guess"})
            assert status == 401
            assert held[1].delays == [LONGEST_DELAY]  # its 11th failure over the cluster, not its first
            await owner.login()  # the right token, all the same


async def test_every_process_shows_what_the_whole_cluster_spent(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    postgresql_database: str,
    redis_server: RedisServer,
) -> None:
    """Turns run on whichever process takes them from the queue; each console reads what every process
    settled in the database, so both show each chat's whole spending (figures a process kept for itself
    would show only its own turns')."""
    chats = list(range(11, 17))
    async with open_cluster(
        home, emulator, emulator_url, redis_url=redis_server.url, database_url=postgresql_database, count=2,
        environ={"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN}, budgets={"chat": {"daily_usd": 0.5}},
    ) as cluster:  # fmt: skip
        for chat in chats:
            cluster.fake.private_message(chat, "hello")
        await cluster.settled()
        store = cluster.gateways[0].services.runtime.store
        spent = {
            f"telegram:dm:{chat}": sum(p.cost for p in await store.usage.by_purpose(f"telegram:dm:{chat}"))
            for chat in chats
        }
        pages = []
        for gateway in cluster.gateways:
            async with console_client(gateway.http.url) as client:
                await client.login()
                pages.append([(await client.get(path))[1] for path in ("/console/budgets", "/console/chats")])
    assert all(cost > 0 for cost in spent.values())
    for budgets, chat_list in pages:
        for key, cost in spent.items():
            line = row_of(budgets, f'data-scope="chat:{key}"')
            assert f"{usd(cost)} of $0.50 · " in line
            listed = row_of(chat_list, f'data-key="{key}"')
            assert f"{cost / 0.5:.1%}" in listed
