"""Limits on the jobs guests make, end to end through the gateway (``/cron add`` and the ``cron`` tool,
the real SDKs against the fakes), and the pure rules behind them.

A guest's job costs the owner a model request per run: at most ``scheduler.max_jobs_per_person`` jobs
per person and ``max_jobs_per_chat`` per chat, and none that runs more often than
``guest_min_interval``; the owner and admins are not limited.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from gateway.cron.jobs import JobCounts
from gateway.cron.manage import JobLimits, count_refusal, interval_refusal
from gateway.cron.schedule import format_gap, parse_schedule, shortest_gap
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.gateway.test_access_gateway import tool_results
from tests.gateway_support import ADMIN, FRIEND, telegram_gateway

pytestmark = pytest.mark.timeout(90)

PER_PERSON = (
    "You already have 10 scheduled jobs, the most one person may have: remove one before adding another."
)
EVERY_MINUTE = (
    "Jobs made by guests may run at most once every 15 minutes, and '* * * * *' runs every 1 minute: "
    "choose a longer interval."
)
OTHER_GUEST = 4


async def test_a_guest_gets_ten_jobs_and_the_other_seventeen_are_refused_in_one_sentence(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    scheduler = {"guest_min_interval": 60}  # every minute is allowed here: the count is under test
    async with telegram_gateway(home, emulator, emulator_url, scheduler=scheduler) as harness:
        for number in range(27):
            harness.fake.private_message(FRIEND, f"/cron add every 1m | Ping {number}")
        await harness.settled()
        made = await harness.gateway.services.runtime.cron.jobs.all()
        answers = harness.texts(FRIEND)
        emulator.script(
            Reply(tool_calls=[ToolUse("cron", {"action": "create", "schedule": "every 1h", "prompt": "Hi"})]),
            Reply(text="You have too many jobs."),
        )
        harness.fake.private_message(FRIEND, "remind me every hour to drink water")
        await harness.settled()
        [by_tool] = tool_results(emulator.requests[-1])
        harness.fake.private_message(ADMIN, "/cron add every 1m | The owner's check")
        harness.fake.private_message(ADMIN, "/cron add * * * * * | The owner's own every-minute job")
        await harness.settled()
        owners = harness.texts(ADMIN)
        total = len(await harness.gateway.services.runtime.cron.jobs.all())

    assert len(made) == 10 and {job.creator.person for job in made if job.creator} == {f"telegram:{FRIEND}"}
    assert sum(text.startswith("Created job") for text in answers) == 10
    assert [text for text in answers if not text.startswith("Created job")] == [PER_PERSON] * 17
    assert by_tool["is_error"] and by_tool["content"] == PER_PERSON
    assert owners[-1].startswith("Created job") and total == 12  # admins are not limited


async def test_a_chat_takes_at_most_max_jobs_per_chat_whoever_makes_them(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    allowed = {"allowed_users": [FRIEND, OTHER_GUEST]}
    async with telegram_gateway(
        home, emulator, emulator_url, telegram=allowed, scheduler={"max_jobs_per_chat": 3}
    ) as harness:
        for user in (FRIEND, FRIEND, OTHER_GUEST, OTHER_GUEST):
            harness.fake.group_message(-100, user, "/cron add every 1d | The news", command=True)
            await harness.settled()
        answers = harness.texts(-100)

    assert [text.startswith("Created job") for text in answers] == [True, True, True, False]
    assert answers[-1] == (
        "This chat already has 3 scheduled jobs, the most one chat may have: remove one before adding "
        "another."
    )


async def test_a_guests_every_minute_job_is_refused_by_the_shortest_interval_and_the_owners_is_not(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        for user, schedule in [
            (FRIEND, "* * * * *"), (FRIEND, "every 5m"), (FRIEND, "*/15 * * * *"), (ADMIN, "* * * * *")
        ]:  # fmt: skip
            harness.fake.private_message(user, f"/cron add {schedule} | Ping")
            await harness.settled()  # one at a time: each is answered at once, outside the chat's lane
        guest, owner = harness.texts(FRIEND), harness.texts(ADMIN)
        made = await harness.gateway.services.runtime.cron.jobs.all()

    assert guest[0] == EVERY_MINUTE
    assert guest[1] == (
        "Jobs made by guests may run at most once every 15 minutes, and 'every 5m' runs every 5 minutes: "
        "choose a longer interval."
    )
    assert guest[2].startswith("Created job") and owner[-1].startswith("Created job")
    assert sorted(job.schedule for job in made) == ["* * * * *", "*/15 * * * *"]


UTC = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("schedule", "zone", "gap"),
    [
        ("* * * * *", UTC, dt.timedelta(minutes=1)),
        ("*/15 * * * *", UTC, dt.timedelta(minutes=15)),
        ("0,5 8 * * *", UTC, dt.timedelta(minutes=5)),  # twice a day, five minutes apart
        ("59 23 * * 5", UTC, dt.timedelta(days=7)),
        ("0 8 * * 1-5", UTC, dt.timedelta(days=1)),
        ("0 8 * * *", BERLIN, dt.timedelta(hours=23)),  # in real time: the day clocks go forward
        ("30 2 * * *", BERLIN, dt.timedelta(hours=1)),  # the night clocks go back: twice, an hour apart
        ("every 2h", UTC, dt.timedelta(hours=2)),
        ("in 30m", UTC, None),
    ],
)
def test_the_shortest_gap_between_two_runs_of_a_schedule(
    schedule: str, zone: ZoneInfo, gap: dt.timedelta | None
) -> None:
    now = dt.datetime(2026, 3, 2, 9, 0, tzinfo=zone)
    assert shortest_gap(parse_schedule(schedule, zone, now), zone, now) == gap


def test_limits_refuse_in_one_sentence_and_let_everything_below_through() -> None:
    limits = JobLimits(per_chat=3, per_person=2, min_interval=900)
    assert count_refusal(JobCounts(in_chat=2, by_creator=1), limits) is None
    assert count_refusal(JobCounts(in_chat=0, by_creator=2), limits) == (
        "You already have 2 scheduled jobs, the most one person may have: remove one before adding another."
    )
    assert count_refusal(JobCounts(in_chat=3, by_creator=0), limits) == (
        "This chat already has 3 scheduled jobs, the most one chat may have: remove one before adding "
        "another."
    )
    assert interval_refusal(None, "in 5m", limits) is None  # once: no interval
    assert interval_refusal(dt.timedelta(minutes=15), "*/15 * * * *", limits) is None
    assert interval_refusal(dt.timedelta(seconds=90), "x", JobLimits(min_interval=3600)) == (
        "Jobs made by guests may run at most once every 1 hour, and 'x' runs every 90 seconds: choose a "
        "longer interval."
    )
    assert [format_gap(dt.timedelta(seconds=s)) for s in (60, 120, 3600, 86400, 172800)] == [
        "1 minute", "2 minutes", "1 hour", "1 day", "2 days"
    ]  # fmt: skip
