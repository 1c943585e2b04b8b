"""Scheduled jobs end to end: real python-telegram-bot against the fake Bot API, the real anthropic SDK
against the emulator, APScheduler inside the gateway.

Runs are mostly driven directly (``scheduler.run_now``, or a job marked due); APScheduler's own timing
is used only where the scheduler is the point (a one-shot added from the command line, misfires at
start-up). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable

import pytest

from agent.memory import OWNER_SCOPE, user_scope
from gateway.cron.jobs import CronJob, CronJobs, NewJob, RunStatus, parse_target
from gateway.cron.runner import CronRunner
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.fakes import FakeTelegram
from tests.fakes.waiting import wait_until, wait_until_awaited
from tests.gateway_support import ADMIN, FRIEND, Harness, telegram_gateway
from tests.helpers import chat_in_terminal, herald_cli, prompt_hashes, write_project_notes


async def eventually(check: Callable[[], object], what: str) -> None:
    await wait_until(check, what=what)


async def job_state(harness: Harness, job_id: str) -> CronJob:
    job = await harness.gateway.services.runtime.cron.jobs.get(job_id)
    assert job is not None
    return job


async def until_status(harness: Harness, job_id: str, *statuses: RunStatus) -> CronJob:
    async def settled() -> CronJob | None:
        job = await job_state(harness, job_id)
        return job if job.last_status in statuses else None

    job = await wait_until_awaited(settled, what=f"job {job_id} in one of {statuses}")
    assert job is not None
    return job


def session_requests(emulator: ProviderEmulator, marker: str) -> list[RecordedRequest]:
    """Requests whose system prompt contains ``marker`` (a job's name appears in its session's)."""
    return [r for r in emulator.requests if marker in r.system_json]


async def test_a_job_created_by_the_tool_runs_in_its_own_session_and_posts_to_the_chat(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    write_project_notes()  # the prompt is over the model's minimum cacheable length
    create = {"action": "create", "schedule": "every 1h", "prompt": "Summarise my feeds.", "name": "Feeds"}
    emulator.script(
        Reply(tool_calls=[ToolUse("cron", create)]),
        Reply(text="Done: your feeds every hour."),
        Reply(tool_calls=[ToolUse("cron", {"action": "create", "schedule": "every 1m", "prompt": "spawn"})]),
        Reply(text="**Feeds**: nothing new."),
        Reply(text="Second summary."),
        Reply(text="  [SILENT] \n"),
    )
    async with telegram_gateway(home, emulator, emulator_url, gateway={"stream_edit_interval": 0}) as harness:
        harness.fake.private_message(FRIEND, "post my feeds every hour")
        await harness.settled()
        [job] = await harness.gateway.services.runtime.cron.jobs.all()
        scheduler = harness.gateway.scheduler
        assert scheduler.scheduled_next(job.id) == pytest.approx(job.next_run_at)
        assert (job.name, job.schedule) == ("Feeds", "every 1h")
        assert job.target == parse_target(f"telegram:{FRIEND}")
        assert job.memory_scope == user_scope("telegram", str(FRIEND))  # the creator's memory

        assert await scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        first_answer = harness.visible(FRIEND)[-1]
        assert await scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        assert await scheduler.run_now(job.id) is RunStatus.SILENT
        await harness.settled()
        texts = harness.texts(FRIEND)
        job = await job_state(harness, job.id)
        all_jobs = await harness.gateway.services.runtime.cron.jobs.all()
        listing = await herald_cli("cron", "list")
        report = await herald_cli("insights")

    assert texts == ["Done: your feeds every hour.", "Feeds: nothing new.", "Second summary."]  # no [SILENT]
    assert {"type": "bold", "offset": 0, "length": 5} in first_answer.entities  # rendered for Telegram
    assert len(all_jobs) == 1  # the run's attempt to make a job was refused
    assert "not available in this context" in emulator.requests[3].body.decode()

    runs = session_requests(emulator, "Feeds")
    assert len(runs) == 4 and len(prompt_hashes(runs)) == 1  # one session, its bytes built once
    first_run, second_run = runs[0], runs[2]
    assert first_run.json["messages"][0]["content"][0]["text"] == "Summarise my feeds."
    assert second_run.cache_read >= first_run.prompt_tokens  # the second run reads the prompt from cache
    assert job.last_status is RunStatus.SILENT and job.repeat is None and job.enabled
    assert "answered [SILENT], nothing sent" in listing and job.id in listing
    assert "main turns (2 requests)" in report and "cron runs (4 requests)" in report


async def test_a_failed_delivery_is_retried_and_a_refused_one_is_listed_as_failed(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Water the plants."), Reply(text="Water them again."))
    async with telegram_gateway(home, emulator, emulator_url, gateway={"stream_edit_interval": 0}) as harness:
        fake = harness.fake
        fake.private_message(ADMIN, "/cron add every 2h | remind me to water the plants")
        await harness.settled()
        created = harness.texts(ADMIN)[-1]
        assert created.startswith("Created job ") and "every 2h" in created
        [job] = await harness.gateway.services.runtime.cron.jobs.all()
        assert job.memory_scope == OWNER_SCOPE  # an admin's direct chat: the owner's memory

        fake.fail_next("sendMessage", 502)  # retryable: the sender tries again
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        assert harness.texts(ADMIN)[-1] == "Water the plants."
        assert "delivery sent" in await herald_cli("cron", "list")

        fake.fail_next("sendMessage", 403, description="Forbidden: bot was blocked by the user")
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
        listing = await herald_cli("cron", "list")
        metrics = harness.gateway.services.metrics.render()

        emulator.fail_next(400)  # the model request is refused for good: the run fails
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.FAILED
        await harness.settled()
        failed_run = await herald_cli("cron", "list")
    assert "Water them again." not in harness.texts(ADMIN)
    assert "delivery FAILED: " in listing and "blocked by the user" in listing
    assert "delivery sent" not in listing
    warning = harness.texts(ADMIN)[-1]
    assert warning.startswith(f'⚠️ Scheduled job "remind me to water the plants" ({job.id}) failed: ')
    assert "failed: " in failed_run and "error message delivery sent" in failed_run
    assert b'gateway_delivery_failures_total{platform="telegram"} 1.0' in metrics
    assert len(fake.calls_to("sendMessage")) >= 4  # /cron reply, a failed try and its retry, the refusal


async def test_cron_in_chat_manages_this_chats_jobs_only(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        fake = harness.fake
        cron = harness.gateway.services.runtime.cron
        elsewhere = await cron.jobs.add(
            NewJob("Owner's", "report", "every 1d", parse_target(f"telegram:{ADMIN}"), "cli:local",
                   OWNER_SCOPE, None, time.time() + 86400)
        )  # fmt: skip
        for command in (
            "/cron add every 2h | water the plants",
            "/cron add whenever | nope",
            "/cron",
            f"/cron pause {elsewhere.id}",
        ):
            fake.private_message(FRIEND, command)
            await harness.settled()
        mine = [job for job in await cron.jobs.all() if job.id != elsewhere.id]
        fake.private_message(FRIEND, f"/cron pause {mine[0].id}")
        await harness.settled()
        paused = await job_state(harness, mine[0].id)
        replies = harness.texts(FRIEND)
    assert replies[0].startswith("Created job") and len(mine) == 1
    assert replies[1].startswith("'whenever' is not a schedule I can use")
    assert mine[0].id in replies[2] and elsewhere.id not in replies[2]  # this chat's jobs only
    assert replies[3] == f"There is no job '{elsewhere.id}' in this chat; list the jobs to see their ids."
    assert replies[4].startswith("Paused:") and not paused.enabled
    assert emulator.requests == []  # commands never reach the model


async def test_jobs_survive_a_restart_and_missed_runs_run_once_within_the_grace_window(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    fake.register_chat(FRIEND)
    now = time.time()
    target = parse_target(f"telegram:{FRIEND}")

    def job(name: str, schedule: str, next_run_at: float, repeat: int | None = None) -> NewJob:
        return NewJob(name, f"Run {name}.", schedule, target, "cli:local", OWNER_SCOPE, repeat, next_run_at)

    async with open_home_storage(home) as storage:  # written while the gateway is down
        jobs = CronJobs(storage)
        late = await jobs.add(job("late", "every 1h", now - 600))  # 10 minutes late: runs
        backlog = await jobs.add(job("backlog", "every 1h", now - 3.5 * 3600))  # 4 missed: one run
        stale = await jobs.add(job("stale", "every 1d", now - 3 * 86400 - 7200))  # latest missed 2h ago
        gone = dt.datetime.fromtimestamp(now - 7200, dt.UTC).isoformat()
        expired = await jobs.add(job("expired", gone, now - 7200, repeat=1))  # a one-shot 2h late

    emulator.script(Reply(text="late done"), Reply(text="backlog done"))
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:
        for ran in (late, backlog):
            await until_status(harness, ran.id, RunStatus.OK)
        for skipped in (stale, expired):
            await until_status(harness, skipped.id, RunStatus.MISSED)
        await harness.settled()
        states = {j.id: await job_state(harness, j.id) for j in (late, backlog, stale, expired)}
        listing = await herald_cli("cron", "list")

    assert len(emulator.requests) == 2 and sorted(harness.texts(FRIEND)) == ["backlog done", "late done"]
    assert states[late.id].next_run_at == pytest.approx(now - 600 + 3600, abs=1)
    assert states[backlog.id].next_run_at == pytest.approx(now - 0.5 * 3600 + 3600, abs=1)
    assert states[stale.id].enabled and states[stale.id].next_run_at == pytest.approx(now + 22 * 3600, abs=1)
    assert not states[expired.id].enabled and states[expired.id].next_run_at is None
    assert "more than scheduler.misfire_grace allows" in listing

    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:  # restarted again
        scheduler = harness.gateway.scheduler
        reloaded = {j: scheduler.scheduled_next(j) for j in (late.id, backlog.id, stale.id, expired.id)}
    assert reloaded[late.id] == pytest.approx(states[late.id].next_run_at)
    assert reloaded[stale.id] == pytest.approx(states[stale.id].next_run_at)
    assert reloaded[expired.id] is None
    assert len(emulator.requests) == 2  # nothing ran twice


async def test_a_job_added_from_the_command_line_is_picked_up_and_fired_by_the_scheduler(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="One-shot answer."), Reply(text="Run on request."))
    async with telegram_gateway(home, emulator, emulator_url, scheduler={"poll_interval": 0.1}) as harness:
        harness.fake.register_chat(FRIEND)
        added = await herald_cli(
            "cron", "add", "--target", f"telegram:{FRIEND}", "--schedule", "in 1s", "--name", "soon", "ping"
        )
        await eventually(lambda: harness.texts(FRIEND) == ["One-shot answer."], "the one-shot's answer")
        job_id = added.split()[2]
        done = await until_status(harness, job_id, RunStatus.OK)
        assert not done.enabled and done.repeat == 0  # a one-shot runs once

        daily = await herald_cli(
            "cron", "add", "--target", f"telegram:{FRIEND}", "--schedule", "0 8 * * *", "daily report"
        )
        daily_id = daily.split()[2]
        await herald_cli("cron", "run", daily_id)
        await eventually(lambda: harness.texts(FRIEND)[-1:] == ["Run on request."], "the run on request")
        after = await until_status(harness, daily_id, RunStatus.OK)
    assert added.startswith("Created job ") and "posts to telegram:2" in added
    assert after.enabled and after.next_run_at is not None and after.next_run_at > time.time()


async def test_a_job_never_runs_twice_at_once(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.stream_delay = 0.02
    emulator.script(Reply(text="only once " * 20))
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        harness.fake.register_chat(FRIEND)
        cron = harness.gateway.services.runtime.cron
        job = await cron.jobs.add(
            NewJob("Once", "go", "every 1h", parse_target(f"telegram:{FRIEND}"), "cli:local", OWNER_SCOPE,
                   None, time.time() + 3600)
        )  # fmt: skip
        scheduler = harness.gateway.scheduler
        scheduler.pause()  # the runs below are all there is
        await cron.jobs.mark_due(job.id)
        # Due now, started three times, as schedulers do when they fire (the next time is an hour
        # ahead): twice in this process, once by a runner of its own, as another process would. That
        # one passes the in-process guard and is stopped by the job's lock and its claim in the table.
        following = time.time() + 3600
        elsewhere = CronRunner(harness.gateway.services, cron.jobs)
        outcomes = await asyncio.gather(
            scheduler.runner.run(job.id, next_run_at=following),
            elsewhere.run(job.id, next_run_at=following),
            scheduler.runner.run(job.id, next_run_at=following),
        )
        await harness.settled()
    assert outcomes.count(RunStatus.OK) == 1 and outcomes.count(None) == 2, outcomes
    assert len(emulator.requests) == 1 and emulator.max_in_flight == 1
    assert len(harness.texts(FRIEND)) == 1


async def test_a_run_cut_off_by_shutdown_is_recorded_and_the_next_run_starts_from_a_valid_history(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    fake.register_chat(FRIEND)
    emulator.stall_next(30)  # the first run hangs until the shutdown cuts it off
    quick_drain = {"drain_timeout": 0.1}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=quick_drain) as harness:
        cron = harness.gateway.services.runtime.cron
        job = await cron.jobs.add(
            NewJob("Cut", "go on", "every 1h", parse_target(f"telegram:{FRIEND}"), "cli:local", OWNER_SCOPE,
                   None, time.time() + 3600)
        )  # fmt: skip
        running = asyncio.create_task(harness.gateway.scheduler.run_now(job.id))
        await eventually(lambda: emulator.requests, "the run's model request")
    with contextlib.suppress(asyncio.CancelledError):
        await running
    emulator.script(Reply(text="Back again."))
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:
        cut = await job_state(harness, job.id)
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        await harness.settled()
    assert cut.last_status is RunStatus.INTERRUPTED
    roles = [m["role"] for m in emulator.requests[-1].json["messages"]]
    assert roles == ["user", "assistant", "user"]  # the cut-off run is closed, not left dangling
    assert harness.texts(FRIEND) == ["Back again."]


async def test_a_scheduled_run_the_shutdown_cuts_off_is_no_error_in_the_log(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    """A run APScheduler started and the shutdown's drain cancelled is recorded interrupted and told
    once, as a warning; not also as an error with a traceback, as APScheduler reports a job that raised
    (a cancellation too), which made a normal stop look like a crash."""
    fake = FakeTelegram()
    fake.register_chat(FRIEND)
    emulator.stall_next(30)  # the run hangs until the shutdown cuts it off
    quick_drain = {"drain_timeout": 0.1}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=quick_drain) as harness:
        cron = harness.gateway.services.runtime.cron
        job = await cron.jobs.add(
            NewJob("Cut", "go on", "every 1h", parse_target(f"telegram:{FRIEND}"), "cli:local", OWNER_SCOPE,
                   None, time.time() + 0.2)
        )  # fmt: skip
        await eventually(lambda: emulator.requests, "the scheduled run's model request")
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:
        cut = await job_state(harness, job.id)
    assert cut.last_status is RunStatus.INTERRUPTED
    assert [r.getMessage() for r in caplog.records if r.levelno >= 40] == []
    assert any("cancelled by the shutdown" in r.getMessage() for r in caplog.records)


async def test_cron_in_the_terminal_lists_every_job_and_says_how_to_add_one(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    await herald_cli(
        "cron", "add", "--target", f"telegram:{FRIEND}", "--schedule", "every 2h", "Feeds digest"
    )
    chat = await chat_in_terminal(
        make_config(emulator_url), home, "/cron", "/cron add every 1h | more", "/quit"
    )
    assert "Feeds" in chat.out and f"telegram:{FRIEND}" in chat.out  # the owner sees every job
    assert "herald cron add --target" in chat.out
    listing = await herald_cli("cron", "list")
    assert "Feeds" in listing and "more" not in listing  # nothing was created
    assert emulator.requests == []
