"""Spend limits end to end: real python-telegram-bot against the fake Bot API, the real anthropic SDK
against the emulator. Requests are counted at the emulator: a refused message must reach no model.

Costs come from the model table (claude-sonnet-4-6, with its cache prices) and the emulator's reported
usage; the tests do not assume what a turn costs exactly: they go on until a limit stops something, then
check what happened around it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.base import ChatAddress, ChatType
from agent.db.schema import requests, sessions
from agent.loop import SPEND_CUT_NOTICE
from agent.memory import user_scope
from agent.spending.windows import day_window, month_window
from gateway.access.auth import Speaker
from gateway.budgets.lines import MONTHS, usd
from gateway.cron.jobs import RunStatus
from gateway.cron.manage import COMMAND_LINE, Caller
from gateway.home import HeraldHome
from gateway.timezones import resolve_timezone
from tests.console_support import CONSOLE_TOKEN, console_client
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.gateway_support import ADMIN, FRIEND, Harness, telegram_gateway
from tests.spend_support import crossing, dollars

pytestmark = pytest.mark.timeout(120)

BERLIN = resolve_timezone("Europe/Berlin")
ZONE = {"timezone": "Europe/Berlin"}
SHORT = {"max_tokens": 100}  # an answer is estimated at 100 output tokens before it is sent
TODO = {"todos": [{"id": "1", "content": "check", "status": "pending"}], "merge": True}
WAIT = 15.0


async def costs(harness: Harness, session_key: str | None = None) -> list[float]:
    """What each request recorded cost (of one chat's sessions, or all), in order."""
    query = sa.select(requests.c.estimated_cost).order_by(requests.c.id)
    if session_key is not None:
        query = query.join_from(requests, sessions, sessions.c.id == requests.c.session_id).where(
            sessions.c.session_key == session_key
        )
    storage = harness.gateway.services.runtime.storage
    return await storage.read(lambda conn: [float(cost) for cost in conn.execute(query).scalars()])


async def spent(harness: Harness, scope: str) -> float:
    """What the spending window of ``scope`` says today (in Berlin, by the gate's clock)."""
    gate = harness.gateway.services.runtime.spending
    period = day_window(gate.clock(), BERLIN).id
    found = await harness.gateway.services.runtime.store.spending.spent([(scope, period)])
    return found.get((scope, period), 0.0)


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_chat_near_its_daily_limit_is_told_what_it_spent_and_asks_the_model_nothing_more(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Each request is refused when its estimate would cross the limit: the chat is told what it really
    spent, what the request could cost and what is left, each time (a smaller request may still fit);
    other chats go on."""
    limit = 0.015  # the first turn writes the prompt to the cache (~$0.010), later ones read it (~$0.001)
    budgets = {"chat": {"daily_usd": limit}}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model=SHORT
    ) as harness:
        fake = harness.fake
        for number in range(40):
            fake.private_message(FRIEND, f"question {number}")
            await harness.settled()
            if harness.texts(FRIEND)[-1].startswith("This chat has"):
                break
        else:
            pytest.fail("the chat was never refused")
        answered = harness.texts(FRIEND)[:-1]
        asked = len(emulator.requests)
        assert number >= 2 and len(answered) == number == asked  # every earlier message was answered

        for extra in range(3):
            fake.private_message(FRIEND, f"and another thing {extra}")
            await harness.settled()
        refusals = harness.texts(FRIEND)[len(answered) :]
        assert len(emulator.requests) == asked  # no model request for them

        fake.private_message(ADMIN, "meanwhile in another chat")
        await harness.settled()
        assert len(emulator.requests) == asked + 1 and len(harness.texts(ADMIN)) == 1

        fake.private_message(FRIEND, "/budget")
        await harness.settled()
        report = harness.texts(FRIEND)[-1]
        chat_spent = await spent(harness, f"chat:telegram:dm:{FRIEND}")
        friend_costs = await costs(harness, f"telegram:dm:{FRIEND}")
    assert chat_spent == pytest.approx(sum(friend_costs))  # what the requests cost, cache prices included
    assert chat_spent < limit  # the gate let nothing overshoot here: each estimate covered its cost
    assert len(refusals) == 4  # each refused message is told why, none is left without a word
    for line in refusals:
        told = crossing(line)
        assert told["who"] == "This chat has" and told["limit"] == "$0.015" and told["window"] == "for today"
        assert told["spent"] == usd(chat_spent) and told["left"] == usd(limit - chat_spent)
        assert dollars(told["needed"]) > limit - chat_spent
        assert told["when"] == "at 00:00 Europe/Berlin"
    assert report.splitlines()[1].startswith(f"• This chat: {usd(chat_spent)} of $0.015 (")
    assert "Days start again at 00:00 Europe/Berlin" in report


async def test_a_limit_used_up_is_told_once_per_window_and_a_new_day_answers_again(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """An exempt admin spends the bot's whole day (admins are never refused): everyone else is told once
    that the limit is used up, further messages get no reply and no model request, until midnight."""
    limit = 0.015
    line = "This bot has used its $0.015 for today; it resets at 00:00 Europe/Berlin."
    budgets = {"bot": {"daily_usd": limit}, "exempt_admins": True}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model=SHORT
    ) as harness:
        fake = harness.fake
        for number in range(40):
            fake.private_message(ADMIN, f"question {number}")
            await harness.settled()
            if await spent(harness, "bot") >= limit:
                break
        else:
            pytest.fail("the admin never used the bot's day up")
        asked = len(emulator.requests)
        for extra in range(3):
            fake.private_message(FRIEND, f"and another thing {extra}")
            await harness.settled()
        assert harness.texts(FRIEND) == [line]  # one line for the window, none per message
        assert len(emulator.requests) == asked  # and no model request for them

        gate = harness.gateway.services.runtime.spending
        midnight = day_window(time.time(), BERLIN).end
        assert midnight is not None
        shift = midnight + 1 - time.time()
        gate.clock = lambda: time.time() + shift  # a second after midnight in Berlin
        fake.private_message(FRIEND, "a new day")
        await harness.settled()
        assert len(emulator.requests) == asked + 1
        assert len(harness.texts(FRIEND)) == 2 and harness.texts(FRIEND)[-1] != line


async def test_a_monthly_limit_far_from_utc_starts_again_at_that_zones_midnight(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """In Pacific/Kiritimati (UTC+14) a month starts at 10:00 UTC of the day before: on a virtual clock,
    the bot's month used up an hour before its end is still used up a second before it, and answers
    again a second after it; the line names the zone's midnight."""
    zone = resolve_timezone("Pacific/Kiritimati")
    limit = 0.015
    budgets = {"bot": {"monthly_usd": limit}, "exempt_admins": True}
    kiritimati = {"timezone": "Pacific/Kiritimati"}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=kiritimati, model=SHORT
    ) as harness:
        gate = harness.gateway.services.runtime.spending
        month = month_window(time.time(), zone)
        assert month.end is not None
        end = month.end

        def at(moment: float) -> None:
            shift = moment - time.time()
            gate.clock = lambda: time.time() + shift

        async def bot_month() -> float:
            period = month_window(gate.clock(), zone).id
            found = await harness.gateway.services.runtime.store.spending.spent([("bot", period)])
            return found.get(("bot", period), 0.0)

        at(end - 3600)  # an hour before the month ends in Kiritimati
        fake = harness.fake
        for number in range(40):
            fake.private_message(ADMIN, f"question {number}")
            await harness.settled()
            if await bot_month() >= limit:
                break
        else:
            pytest.fail("the admin never used the bot's month up")
        asked = len(emulator.requests)
        fake.private_message(FRIEND, "anything left?")
        await harness.settled()
        at(end - 1)  # a second before the month ends there: still the same month
        fake.private_message(FRIEND, "and now?")
        await harness.settled()
        refused = len(emulator.requests) == asked
        at(end + 1)  # a second after: a new month
        fake.private_message(FRIEND, "a new month")
        await harness.settled()

    first = dt.datetime.fromtimestamp(end, zone)
    assert first.day == 1 and first.hour == 0 and dt.datetime.fromtimestamp(end, dt.UTC).hour == 10
    assert harness.texts(FRIEND)[0] == (
        f"This bot has used its $0.015 for this month; it resets on 1 {MONTHS[first.month - 1]} at 00:00 "
        "Pacific/Kiritimati."
    )
    assert refused and len(emulator.requests) == asked + 1  # only the new month's message was sent
    assert len(harness.texts(FRIEND)) == 2  # told once in the old month, answered in the new one


async def test_a_request_that_would_cross_the_limit_says_what_was_spent_and_a_smaller_one_is_answered(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Issue 29: a long document's estimate crossed the bot's $0.05 while a third of it was spent; the
    chat was told the $0.05 was used, and the next short message was answered. The line says what
    happened, and the short message after it is answered as the line lets one expect."""
    limit = 0.05
    budgets = {"bot": {"daily_usd": limit}}
    document = ("The quarterly figures, line by line, with every remark the auditors made. " * 800).encode()
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model=SHORT
    ) as harness:
        fake = harness.fake
        fake.private_message(FRIEND, "hello")
        await harness.settled()
        asked = len(emulator.requests)
        fake.private_message(FRIEND, "summarise this", document=document, file_name="figures.txt")
        await harness.settled()
        refused = harness.texts(FRIEND)[-1]
        bot_spent = await spent(harness, "bot")
        assert len(emulator.requests) == asked  # the long one reached no model
        fake.private_message(FRIEND, "just say hi")
        await harness.settled()
        shown = harness.texts(FRIEND)
    told = crossing(refused)
    assert 0 < bot_spent < limit / 2
    assert told["who"] == "This bot has" and told["spent"] == usd(bot_spent)
    assert told["left"] == usd(limit - bot_spent) and dollars(told["needed"]) > limit - bot_spent
    assert "used its" not in refused
    assert len(emulator.requests) == asked + 1 and len(shown) == 3  # the short one was answered


def tool_rounds(count: int) -> list[Reply]:
    """A turn that calls a tool ``count`` times (each round says something first), then answers."""
    rounds = [Reply(text=f"Step {n}: checking.", text_tokens=300, tool_calls=[ToolUse("todo", TODO)])
              for n in range(count)]  # fmt: skip
    return [*rounds, Reply(text="All done.")]


async def test_a_turn_that_reaches_the_limit_mid_way_stops_before_its_next_request(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(*tool_rounds(40))  # far more rounds than the limit pays for
    budgets = {"person": {"daily_usd": 0.05}}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model={"max_tokens": 400}
    ) as harness:
        harness.fake.private_message(FRIEND, "check everything")
        await harness.settled()
        shown = harness.texts(FRIEND)
        paid = await costs(harness)
        person_spent = await spent(harness, f"person:telegram:{FRIEND}")
    assert 2 <= len(emulator.requests) < 41  # it ran some rounds, then stopped before the next request
    assert len(shown) == 1  # the rounds' streamed words replaced by the line: never a half answer
    told = crossing(shown[0])
    assert told["who"] == "You have" and told["spent"] == usd(person_spent)
    assert told["left"] == usd(0.05 - person_spent) and dollars(told["needed"]) > 0.05 - person_spent
    assert person_spent == pytest.approx(sum(paid))
    assert person_spent <= 0.05


async def test_exempt_admins_go_on_and_a_background_review_over_the_limit_is_skipped_unbilled(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    budgets = {"chat": {"daily_usd": 0}, "exempt_admins": True}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, review={"every_turns": 1}
    ) as harness:
        harness.fake.private_message(ADMIN, "hello, it's me")
        await harness.settled()
        reviews = harness.gateway.services.metrics.reviews
        await until(lambda: reviews.labels("skipped")._value.get() == 1, "the review to be skipped")
        assert len(emulator.requests) == 1  # the admin's turn; the review never reached the model
        assert len(harness.texts(ADMIN)) == 1

        harness.fake.private_message(FRIEND, "hello")
        await harness.settled()
        assert harness.texts(FRIEND) == ["This chat has a spend limit of $0.00 for today: no model requests."]
        assert len(emulator.requests) == 1
        admin_spent = await spent(harness, f"chat:telegram:dm:{ADMIN}")
        paid = await costs(harness)
    assert admin_spent == pytest.approx(sum(paid)) and len(paid) == 1  # counted, and nothing for the review


async def test_a_background_review_is_counted_in_the_chats_and_the_persons_scopes(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """A review runs after the turn, in the background, on the chat's session: what it costs counts where
    the turn's cost counts (the chat, the person, the bot), so nobody can spend past a limit through it."""
    budgets = {"chat": {"daily_usd": 5.0}, "person": {"daily_usd": 5.0}, "bot": {"daily_usd": 50.0}}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, review={"every_turns": 1}
    ) as harness:
        harness.fake.private_message(FRIEND, "hello, remember that I like tea")
        await harness.settled()
        reviews = harness.gateway.services.metrics.reviews
        await until(lambda: reviews.labels("done")._value.get() == 1, "the review to be done")
        storage = harness.gateway.services.runtime.storage
        query = sa.select(requests.c.purpose, requests.c.estimated_cost)
        rows = await storage.read(lambda conn: [(p, float(c)) for p, c in conn.execute(query).all()])
        chat = await spent(harness, f"chat:telegram:dm:{FRIEND}")
        person = await spent(harness, f"person:telegram:{FRIEND}")
        bot = await spent(harness, "bot")
    purposes = {purpose for purpose, _ in rows}
    assert purposes == {"turn", "review"}, purposes
    total = sum(cost for _, cost in rows)
    assert (chat, person, bot) == pytest.approx((total, total, total)), rows  # the review too, everywhere


async def test_the_admins_are_warned_once_when_a_scope_nears_its_limit(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    budgets = {"bot": {"daily_usd": 10.0}, "warn_at": 0.0005}  # a turn costs more than $0.005
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model=SHORT
    ) as harness:
        harness.fake.private_message(ADMIN, "hello")  # the admin's direct chat: where warnings go
        await harness.settled()
        for number in range(3):
            harness.fake.private_message(FRIEND, f"question {number}")
            await harness.settled()
        admin_sees = harness.texts(ADMIN)
        friend_sees = harness.texts(FRIEND)
    warnings = [text for text in admin_sees if text.startswith("💸 Spend warning")]
    assert len(warnings) == 1 and len(admin_sees) == 2  # the answer and one warning, not one per turn
    assert warnings[0].startswith("💸 Spend warning: The bot has spent $")
    assert warnings[0].endswith("of its $10.00 for today (0%); it resets at 00:00 Europe/Berlin.")
    assert len(friend_sees) == 3 and not any("Spend warning" in text for text in friend_sees)


async def test_a_scheduled_job_over_its_per_run_limit_stops_and_says_so_each_run(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """Forty tool rounds cost several times the run's $0.05: each run stops inside its limit and the chat
    is told, one of the two ways the bound stops a run. A request that cannot be paid even a short answer
    is not sent (the run fails with the crossing line); one that can be paid a shorter answer is sent with
    ``max_tokens`` lowered to what is left (the answer comes, marked as cut short by the limits)."""
    emulator.script(Reply(text="Hi."), *tool_rounds(40), *tool_rounds(40))
    budgets = {"cron": {"per_run_usd": 0.05}}
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model={"max_tokens": 400}
    ) as harness:
        harness.fake.private_message(FRIEND, "hi")  # the chat the job posts to
        await harness.settled()
        runtime = harness.gateway.services.runtime
        job = await runtime.cron.create(
            COMMAND_LINE, prompt="Check every feed.", schedule="every 1h", name="Feeds",
            target=f"telegram:{FRIEND}",
        )  # fmt: skip
        statuses = [await harness.gateway.scheduler.run_now(job.id)]
        first_run = len(emulator.requests) - 1
        first_paid = sum(await costs(harness, job.session_key))
        statuses.append(await harness.gateway.scheduler.run_now(job.id))
        await harness.settled()
        shown = harness.texts(FRIEND)
        stored = await runtime.cron.jobs.get(job.id)
        paid = await costs(harness, job.session_key)
    failed = f'⚠️ Scheduled job "Feeds" ({job.id}) failed: '
    cut = SPEND_CUT_NOTICE.split("{", 1)[0]  # "The answer was cut short: the spend limits could pay ..."
    assert shown[0] == "Hi." and len(shown) == 3  # every run is a window of its own: each says so
    for status, line in zip(statuses, shown[1:], strict=True):
        if status is RunStatus.FAILED:  # refused before a request it could not pay
            run = crossing(line.removeprefix(failed))
            assert line.startswith(failed)
            assert (run["who"], run["limit"]) == ("This scheduled job has", "$0.05")
            assert run["window"] == "for this run"
            assert dollars(run["spent"]) + dollars(run["left"]) == pytest.approx(0.05, abs=0.0002)
            assert dollars(run["needed"]) > dollars(run["left"])
            assert stored is not None and stored.last_error is not None
        else:  # its last request was sent with what was left: the answer says it was cut short
            assert status is RunStatus.OK and cut in line, line
    assert 2 <= first_run < 41 and 2 <= len(emulator.requests) - 1 - first_run < 41  # stopped early
    assert first_paid <= 0.05 + 1e-9 and sum(paid) - first_paid <= 0.05 + 1e-9  # neither run passed it


async def test_a_guests_scheduled_job_is_charged_to_the_guest_too(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Hi."), *tool_rounds(40))
    budgets = {"person": {"daily_usd": 0.05}}  # no limit on the job: the guest's is what stops it
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model={"max_tokens": 400}
    ) as harness:
        harness.fake.private_message(FRIEND, "hi")
        await harness.settled()
        runtime = harness.gateway.services.runtime
        guest = Speaker("telegram", str(FRIEND), str(FRIEND), ChatType.DIRECT)
        caller = Caller(f"telegram:dm:{FRIEND}", user_scope("telegram", str(FRIEND)),
                        ChatAddress("telegram", str(FRIEND)), creator=guest)  # fmt: skip
        job = await runtime.cron.create(caller, prompt="Check every feed.", schedule="every 1h", name="Feeds")
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.FAILED
        person_spent = await spent(harness, f"person:telegram:{FRIEND}")
        job_spent = await spent(harness, f"cron:{job.id}")
        stored = await runtime.cron.jobs.get(job.id)
    assert 2 <= len(emulator.requests) - 1 < 41  # the run stopped at the guest's limit
    assert job_spent > 0 and person_spent >= job_spent  # the run counted in the guest's window too
    assert person_spent <= 0.05
    assert stored is not None and stored.last_error is not None
    error = stored.last_error  # the guest's own limit stopped it: used up, or too little left for the next
    assert error.startswith("You have used your $0.05 for today") or crossing(error)["limit"] == "$0.05"


async def test_compress_in_a_chat_with_nothing_left_asks_the_model_nothing(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    budgets = {"chat": {"daily_usd": 0}}
    line = "This chat has a spend limit of $0.00 for today: no model requests."
    async with telegram_gateway(home, emulator, emulator_url, budgets=budgets, scheduler=ZONE) as harness:
        harness.fake.private_message(FRIEND, "remember this")
        await harness.settled()
        harness.fake.private_message(FRIEND, "/compress")
        await harness.settled()
        shown = harness.texts(FRIEND)
    assert shown == [line, f"Not compressed: {line}"] and emulator.requests == []


@pytest.mark.parametrize("first", ["hello, it's me", "/budget"], ids=["a message", "a command"])
async def test_guests_who_used_the_bots_limit_do_not_lock_the_owner_out_who_hears_the_warning_next(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, first: str
) -> None:
    budgets = {"bot": {"daily_usd": 0.03}, "warn_at": 0.5}  # exempt_admins is not set: its default
    async with telegram_gateway(
        home, emulator, emulator_url, budgets=budgets, scheduler=ZONE, model=SHORT,
        environ={"HERALD_CONSOLE_TOKEN": CONSOLE_TOKEN},
    ) as harness:  # fmt: skip
        fake = harness.fake
        for number in range(40):  # a guest spends the bot's whole day; the owner never wrote to the bot
            asked = len(emulator.requests)
            fake.private_message(FRIEND, f"question {number}")
            await harness.settled()
            if len(emulator.requests) == asked:
                break
        else:
            pytest.fail("the guest was never refused")
        async with console_client(harness.gateway.http.url) as client:
            await client.login()
            status, page, _ = await client.get("/console/budgets", follow=True)
        assert status == 200 and "Spend warnings not delivered" in page  # the console shows it
        assert f'data-admin="telegram:{ADMIN}"' in page and "💸 Spend warning: The bot has spent $" in page

        fake.private_message(ADMIN, first)
        await harness.settled()
        told = harness.texts(ADMIN)
        fake.private_message(ADMIN, "and again")
        await harness.settled()
        again = harness.texts(ADMIN)[len(told) :]
        async with console_client(harness.gateway.http.url) as client:
            await client.login()
            _, page_after, _ = await client.get("/console/budgets", follow=True)
    asked_model = 1 if first.startswith("/") else 2  # a command asks no model
    assert len(emulator.requests) == asked + asked_model  # the owner was answered both times
    assert len(told) == 2 and told[0].startswith("💸 Spend warning: The bot has spent $")  # told first
    assert "of its $0.03 for today" in told[0] and not told[1].startswith("💸")
    assert len(again) == 1 and not again[0].startswith("💸")  # told once
    assert "Spend warnings not delivered" not in page_after
