"""The soak, short (``python -m benchmarks.soak`` is the long one): a gateway that has answered many
messages, images, scheduled runs and API requests holds no more tasks, open files, threads or database
connections once it is idle again than it held idle after its first few. A leak of one of them per
message (a task never ended, a socket or a file never closed, a connection never given back) shows as
sixty here. Connections the test's own servers (the emulator, the fake Bot API, the gateway's API) hold
from pools in the same process are counted apart: how many a pool keeps alive depends on how many
requests happened to overlap, which a loaded machine changes; they are bounded by that instead.

Real python-telegram-bot against the fake Bot API, the real anthropic SDK against the emulator, the
real openai SDK against the gateway's API; on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from dataclasses import dataclass

import openai
import pytest
from sqlalchemy import make_url

from agent.db.postgres import PostgresStorage
from benchmarks.proc import connections_to_itself, open_files, tcp_connections
from gateway.cron.jobs import RunStatus
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator
from tests.fakes.waiting import wait_until
from tests.gateway_support import ADMIN, Harness, telegram_gateway
from tests.media_files import png_file

pytestmark = [pytest.mark.slow, pytest.mark.each_database, pytest.mark.timeout(240)]

API_KEY = "soak-test-key-0123456789abcdef"
CHATS = [20_000 + n for n in range(10)]
SLACK = 4  # pool threads and background work that may come and go
OVERLAP = len(CHATS) + 2  # the most requests one server has in flight: every chat's turn, cron, the API


@dataclass(frozen=True)
class Idle:
    tasks: int
    files: int
    threads: int
    pooled: int  # the most keep-alive connections any of the test's servers holds from this process
    connections: bool | None  # PostgreSQL's pool got every connection back (None: SQLite)


def database_connections(harness: Harness) -> int:
    """This process's connections to PostgreSQL (0 on SQLite): its pool keeps up to ``storage.pool_size``
    of them open once a burst opened them, which is no leak (one never given back is caught by
    ``connections_out``), so open files are counted without them."""
    storage = harness.gateway.services.runtime.storage
    if not isinstance(storage, PostgresStorage):
        return 0
    return tcp_connections("self", make_url(storage.url.sqlalchemy).port or 5432)


async def idle_state(harness: Harness) -> Idle:
    """What the idle gateway holds. A connection a background loop (the pruner, a sweeper) has out comes
    back within moments; a leaked one never does: so it is waited for, not counted at one instant."""
    gc.collect()
    storage = harness.gateway.services.runtime.storage
    returned = None
    if storage.connections_out() is not None:
        returned = await wait_until(lambda: storage.connections_out() == 0, what="every connection back")
        assert b"\ngateway_db_connections_out " in harness.gateway.services.metrics.render()  # for operators
    pooled = connections_to_itself("self")  # each: two descriptors, and the server's handler task
    return Idle(
        tasks=len(asyncio.all_tasks()) - pooled.total(),
        files=open_files("self") - database_connections(harness) - 2 * pooled.total(),
        threads=threading.active_count(),
        pooled=max(pooled.values(), default=0),
        connections=returned,
    )


async def traffic(harness: Harness, client: openai.AsyncOpenAI, job: str, rounds: int) -> None:
    """``rounds`` times: a message in every chat (every fifth an image), one API request, one job run."""
    for number in range(rounds):
        for chat in CHATS:
            if number % 5 == 4:
                harness.fake.private_message(chat, "what is this?", photo=png_file(32, 32))
            else:
                harness.fake.private_message(chat, f"message {number}")
        answer = await client.chat.completions.create(
            model="herald", messages=[{"role": "user", "content": f"api {number}"}]
        )
        assert answer.choices[0].message.content
        assert await harness.gateway.scheduler.run_now(job) is RunStatus.OK
        await harness.settled()


async def test_after_hundreds_of_messages_the_idle_gateway_holds_what_it_held_after_the_first(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    api = {"keys": [{"key": "$SOAK_KEY", "person": "api:soak"}]}
    telegram = {"allowed_users": [str(chat) for chat in CHATS]}
    async with telegram_gateway(
        home, emulator, emulator_url, api=api, telegram=telegram, environ={"SOAK_KEY": API_KEY}
    ) as harness:
        harness.fake.private_message(ADMIN, "/cron add every 1d | Say one sentence about the weather.")
        await harness.settled()
        [job] = await harness.gateway.services.runtime.cron.jobs.all()
        url = harness.gateway.http.url + "/v1"
        async with openai.AsyncOpenAI(base_url=url, api_key=API_KEY, max_retries=0, timeout=60) as client:
            await traffic(harness, client, job.id, rounds=2)  # warm-up: pools, caches, lazy imports
            before = await idle_state(harness)
            await traffic(harness, client, job.id, rounds=6)
            after = await idle_state(harness)
        answered = [len(harness.texts(chat)) for chat in CHATS]
    assert answered == [8] * len(CHATS)  # every message answered once
    assert after.tasks <= before.tasks + SLACK, (before, after)
    assert after.files <= before.files + SLACK, (before, after)
    assert after.threads <= before.threads + SLACK, (before, after)  # pools start threads lazily
    assert after.pooled <= OVERLAP, (before, after)  # one per request would be sixty
    assert after.connections in (None, True), after  # every connection came back (waited for above)
