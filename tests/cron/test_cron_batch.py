"""Scheduled jobs marked ``batch``: their requests go through the batch API at half price, read the same
prompt cache, fall back to a normal request when the batch fails or misses its deadline, and survive a
restart. Real python-telegram-bot against the fake Bot API, the real anthropic / openai SDKs against the
emulator's batch endpoints.

Deadlines pass on a shifted agent clock (no real waiting); polls wait on the one backoff, made short.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import sqlalchemy as sa

from agent.db.schema import requests
from agent.usage import Usage, cost
from gateway.app import Gateway
from gateway.cron.jobs import CronJob, RunStatus
from gateway.cron.manage import COMMAND_LINE
from gateway.home import HeraldHome
from resilience.backoff import Backoff
from tests.cron.test_cron_gateway import job_state, session_requests, until_status
from tests.emulator import ProviderEmulator, Reply
from tests.fakes import FakeTelegram
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until, wait_until_awaited
from tests.gateway.test_gateway_reviews import ReviewingModel, reviews, reviews_done
from tests.gateway_support import FRIEND, Harness, telegram_gateway
from tests.helpers import herald_cli, prompt_hashes, write_project_notes

FAST_POLLS = Backoff(first=0.01, cap=0.05)


def quick_polls(gateway: Gateway) -> None:
    road = gateway.services.runtime.agent.calls.batches
    assert road is not None
    road.polls = FAST_POLLS


async def batch_job(harness: Harness, name: str, **options: Any) -> CronJob:
    """A daily job posting to FRIEND, made as ``herald cron add --batch`` makes it."""
    return await harness.gateway.services.runtime.cron.create(
        COMMAND_LINE,
        prompt=f"Write the {name} digest.",
        schedule="every 1d",
        name=name,
        target=f"telegram:{FRIEND}",
        batch=True,
        **options,
    )


async def recorded(harness: Harness, job: CronJob) -> list[Any]:
    """The Herald usage rows of the job's session (purpose, batch, cost, usage)."""
    job = await job_state(harness, job.id)
    query = sa.select(requests).where(requests.c.session_id == job.session_id).order_by(requests.c.id)
    return list(await harness.gateway.services.runtime.storage.read(lambda conn: conn.execute(query).all()))


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_batch_run_costs_half_and_reads_the_cache_the_normal_run_wrote(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, provider: str
) -> None:
    write_project_notes()  # over the model's minimum cacheable prefix from the first request
    emulator.script(Reply(text="Day one: all quiet."), Reply(text="Day two: one new paper."))
    async with telegram_gateway(home, emulator, emulator_url, provider=provider) as harness:
        harness.fake.register_chat(FRIEND)
        job = await batch_job(harness, "Papers")
        emulator.fail_next(400, api=provider)  # the first run's batch request errors inside its batch
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK  # ... so it went normally
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK  # the batch answered
        await harness.settled()
        rows = await recorded(harness, job)
        listing = await herald_cli("cron", "list")
        report = await herald_cli("insights")
        texts = harness.texts(FRIEND)
        config = harness.gateway.services.runtime.config

    assert texts == ["Day one: all quiet.", "Day two: one new paper."]
    runs = session_requests(emulator, "Papers")
    failed, normal, batched = runs
    assert failed.batch and not failed.ok and not normal.batch and normal.ok and batched.batch and batched.ok
    assert len(prompt_hashes(runs)) == 1  # the batch sent the session's very system and tool bytes
    transport = ("stream", "stream_options")  # how a normal answer travels: all a batch leaves out
    assert failed.json == {key: value for key, value in normal.json.items() if key not in transport}
    assert batched.cache_read >= normal.prompt_tokens * 0.9  # and read what the normal run wrote
    assert [(row.purpose, row.batch) for row in rows] == [("cron", False), ("cron", True)]
    info = config.model_info(rows[1].model)
    for row in rows:
        usage = Usage(
            row.input_tokens, row.output_tokens, row.cache_read_tokens, row.cache_write_5m_tokens,
            row.cache_write_1h_tokens,
        )  # fmt: skip
        assert row.estimated_cost == pytest.approx(cost(usage, info) * (0.5 if row.batch else 1.0))
    assert "batch (half price)" in listing and job.id in listing
    assert "cron runs (1 requests)" in report and "cron runs, batch (1 requests)" in report


async def test_a_batch_not_ended_by_its_deadline_is_cancelled_and_the_run_answers_normally(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.batch_delay = None  # the provider is slow today: no batch ends on its own
    emulator.script(Reply(text="Late but here."))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.register_chat(FRIEND)
        quick_polls(harness.gateway)
        agent = harness.gateway.services.runtime.agent
        shift = 0.0
        agent.clock = lambda: time.time() + shift
        job = await batch_job(harness, "Slow", batch_deadline=3600)
        run = asyncio.create_task(harness.gateway.scheduler.run_now(job.id))
        await wait_until(lambda: emulator.batches, what="the run's batch submitted")
        shift = 3601.0  # an hour later, by the agent's clock
        async with asyncio.timeout(WAIT_TIMEOUT):
            assert await run is RunStatus.OK
        await harness.settled()
        texts = harness.texts(FRIEND)
        rows = await recorded(harness, job)
    [batch_id] = emulator.batches
    assert emulator.cancelled_batches == [batch_id]
    assert texts == ["Late but here."]
    assert [(row.purpose, row.batch) for row in rows] == [("cron", False)]


async def test_a_run_waiting_for_its_batch_goes_on_after_a_restart_and_answers_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.batch_delay = None  # held until the test ends it
    emulator.script(Reply(text="The digest, once."))
    fake = FakeTelegram()
    fake.register_chat(FRIEND)
    gateway = {"drain_timeout": 0}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=gateway) as harness:
        job = await batch_job(harness, "Weekly")
        asyncio.create_task(harness.gateway.scheduler.run_now(job.id))  # noqa: RUF006 - the shutdown ends it
        store = harness.gateway.services.runtime.store
        await wait_until_awaited(lambda: store.batches.waiting_runs("cron:"), what="the run's batch stored")
    emulator.end_batches()  # it ends while no gateway runs
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=gateway) as harness:
        done = await until_status(harness, job.id, RunStatus.OK)
        # a second resume of the same run (a leader that stepped down still had it) finds it finished
        assert await harness.gateway.scheduler.runner.resume(done) is None
        await harness.settled()
        texts = harness.texts(FRIEND)
        rows = await recorded(harness, job)
    assert len(emulator.batches) == 1  # polled on, not submitted again
    assert texts == ["The digest, once."]
    assert [(row.purpose, row.batch) for row in rows] == [("cron", True)]  # billed once
    assert done.last_output == "The digest, once."


async def test_reviews_with_review_batch_go_through_the_batch_api_and_read_the_chats_cache(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()
    emulator.responder = ReviewingModel()
    sections: dict[str, Any] = {"review": {"every_turns": 2}, "agent": {"review_batch": True}}
    async with telegram_gateway(home, emulator, emulator_url, **sections) as harness:
        for text in ("I edit everything in Helix.", "Anyway, what's new?"):
            harness.fake.private_message(FRIEND, text)
            await harness.settled()
        await reviews_done(harness, 1)
        report = await herald_cli("insights")
    turn, review = emulator.requests[1], reviews(emulator)[0]
    assert not turn.batch and review.batch  # the chat's turns are not batched; its review is
    assert review.system_json == turn.system_json and review.tools_json == turn.tools_json
    assert review.cache_read >= turn.cache_read + turn.cache_write > 0
    assert "reviews, batch (2 requests)" in report  # the memory call and the answer after it


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_server_without_a_batch_api_gets_normal_requests_and_says_so_once(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    provider: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    emulator.batch_api = False  # a compatible server (DeepSeek, a local one): 404 on the batch endpoints
    emulator.script(Reply(text="First."), Reply(text="Second."))
    async with telegram_gateway(home, emulator, emulator_url, provider=provider) as harness:
        harness.fake.register_chat(FRIEND)
        job = await batch_job(harness, "Local")
        with caplog.at_level("INFO", logger="agent.batching.road"):
            for _ in range(2):
                assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        texts = harness.texts(FRIEND)
        rows = await recorded(harness, job)
    assert texts == ["First.", "Second."]
    assert [(row.purpose, row.batch) for row in rows] == [("cron", False), ("cron", False)]
    lines = [record.getMessage() for record in caplog.records]
    said = [line for line in lines if "requests that can wait are sent normally" in line]
    assert len(said) == 1  # asked once; the provider is remembered as having none


async def test_cron_batch_in_a_chat_makes_a_job_that_goes_through_the_batch_api(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="ok"), Reply(text="The digest: all quiet."))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        quick_polls(harness.gateway)
        harness.fake.private_message(FRIEND, "/cron batch every 1d | write the daily digest")
        await harness.settled()
        [told] = harness.texts(FRIEND)
        [job] = await harness.gateway.services.runtime.cron.jobs.all()
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        rows = await recorded(harness, job)
        posted = harness.texts(FRIEND)[-1]
    assert told.startswith("Created job ") and "[every 1d, batch (half price)]" in told
    assert job.batch and [(row.purpose, row.batch) for row in rows] == [("cron", True)]
    assert posted == "ok"
