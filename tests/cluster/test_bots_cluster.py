"""Several bots in a cluster: two processes, each serving both bots; each bot on its own PostgreSQL
database and its own Redis database, so each bot elects its own poller and runs its own work queue."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AsyncExitStack

import pytest

from gateway.app import Gateway, open_gateway
from gateway.home import HeraldHome
from tests.bots_support import TOKENS, VARIABLES, bots_config, fake_telegrams
from tests.conftest import postgres_server
from tests.emulator import ProviderEmulator
from tests.gateway_support import FRIEND
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.own_database, pytest.mark.timeout(120)]  # PostgreSQL whatever --storage says


@pytest.fixture
def databases() -> Iterator[dict[str, str]]:
    """A fresh PostgreSQL database per bot."""
    server = postgres_server()
    urls = {name: server.new_database() for name in TOKENS}
    try:
        yield urls
    finally:
        for url in urls.values():
            server.drop(url)


async def test_two_processes_serve_two_bots_each_bot_polled_once_and_answered_from_its_own_state(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    databases: dict[str, str],
    redis_server: RedisServer,
) -> None:
    fakes = fake_telegrams()
    redis = {name: redis_server.url.rsplit("/", 1)[0] + f"/{index + 1}" for index, name in enumerate(TOKENS)}

    def per_bot(instance: str) -> dict[str, dict[str, object]]:
        return {
            name: {
                "settings": {
                    "storage": {"url": databases[name]},
                    "cluster": {"redis_url": redis[name], "instance_id": instance, "lease_ttl": 5.0},
                }
            }
            for name in TOKENS
        }

    async with AsyncExitStack() as stack:
        urls = {name: await stack.enter_async_context(fake.serve()) for name, fake in fakes.items()}
        gateways: list[Gateway] = []
        for instance in ("g0", "g1"):
            config = bots_config(emulator_url, urls, bots=per_bot(instance))
            gateways.append(await stack.enter_async_context(open_gateway(config, home, environ=VARIABLES)))
        fakes["family"].private_message(FRIEND, "a question for the family bot")
        fakes["work"].private_message(FRIEND, "a question for the work bot")
        family = await fakes["family"].wait_for(lambda: fakes["family"].messages(FRIEND), what="an answer")
        work = await fakes["work"].wait_for(lambda: fakes["work"].messages(FRIEND), what="an answer")
        leaders = {bot.name: [g.bot(str(bot.name)).cluster for g in gateways] for bot in gateways[0].bots}
        holding = {name: sum(member is not None and member.leadership.leading for member in members)
                   for name, members in leaders.items()}  # fmt: skip

    assert [m.text.split(" to: ", 1)[1].startswith("a question for the family bot") for m in family] == [True]
    assert [m.text.split(" to: ", 1)[1].startswith("a question for the work bot") for m in work] == [True]
    assert holding == {"family": 1, "work": 1}  # one leader per bot's cluster
    assert fakes["family"].poll_overlaps == [] and fakes["work"].poll_overlaps == []
