"""Rights taken away take effect at once, end to end: real python-telegram-bot against the fake Bot API,
the real anthropic SDK against the emulator (scripted to call tools), a real MCP server over stdio,
APScheduler's jobs run through the gateway.

A session's frozen tool list is a cache invariant, not a permission: a tool call is put to the caller's
rights of the moment, a chat whose session has more than its person may now use starts a new one (and
says so in one line), and a job never runs or posts for a maker who lost access.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent.memory import OWNER_SCOPE, user_scope
from agent.side import CHILD_PREAMBLE
from agent.store import SessionRecord
from gateway.access.pairing import WELCOME
from gateway.cron.jobs import CronJob, RunStatus
from gateway.home import HeraldHome
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.fakes import FakeTelegram
from tests.fakes.web import FakeWeb
from tests.gateway_support import ADMIN, FRIEND, STRANGER, Harness, telegram_gateway
from tests.helpers import herald_cli
from tests.mcp_support import stdio_server

pytestmark = pytest.mark.timeout(90)

REPOSITORY = str(Path(__file__).resolve().parents[2])
MCP = {"servers": {"files": stdio_server(REPOSITORY)}}
ALL_FOR_GUESTS = ["memory", "session_search", "skills", "todo", "delegate", "cron", "web", "mcp"]
NO_WEB_NO_MCP = ["memory", "session_search", "skills", "todo", "delegate", "cron"]
NO_ACCESS = "No tool may run: the person this conversation is for no longer has access to the bot."


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last message."""
    content = request.json["messages"][-1]["content"]
    return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]


def names(session: SessionRecord) -> set[str]:
    return {tool["name"] for tool in session.tools}


async def latest(harness: Harness, user_id: int) -> SessionRecord:
    session = await harness.gateway.services.runtime.store.sessions.latest(f"telegram:dm:{user_id}")
    assert session is not None
    return session


async def only_job(harness: Harness) -> CronJob:
    [job] = await harness.gateway.services.runtime.cron.jobs.all()
    return job


async def job_now(harness: Harness, job_id: str) -> CronJob:
    job = await harness.gateway.services.runtime.cron.jobs.get(job_id)
    assert job is not None
    return job


async def test_tools_taken_from_guests_at_a_restart_are_refused_and_the_chat_starts_anew_with_one_line(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, fake_web: FakeWeb
) -> None:
    page = f"{fake_web.url}/article"
    fake = FakeTelegram()
    wide = {"tools_for_guests": ALL_FOR_GUESTS}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=wide, mcp=MCP) as harness:
        fake.private_message(FRIEND, "hello")
        fake.private_message(FRIEND, f"/cron add every 1d | What is new on {page}?")
        await harness.settled()
        job = await only_job(harness)
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK  # its session is built
        before = await latest(harness, FRIEND)
    assert {"web_fetch", "files__echo"} <= names(before)

    calls = Reply(tool_calls=[ToolUse("web_fetch", {"url": page}), ToolUse("files__echo", {"text": "hi"})])
    narrow = {"tools_for_guests": NO_WEB_NO_MCP}
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, gateway=narrow, mcp=MCP) as harness:
        emulator.script(calls, Reply(text="I can't use those here."))
        fake.private_message(FRIEND, "what does the page say?")
        await harness.settled()
        in_chat = tool_results(emulator.requests[-1])
        after = await latest(harness, FRIEND)
        emulator.script(calls, Reply(text="Nothing to report."))
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        in_job = tool_results(emulator.requests[-1])
        await harness.settled()  # the run's answer is sent
        shown = harness.texts(FRIEND)

    # the chat: a new session without them, said in one line before the answer
    assert after.id != before.id
    assert not {"web_fetch"} & names(after) and not [n for n in names(after) if n.startswith("files__")]
    line = "ℹ️ New session: tools this chat had are no longer allowed here ("
    assert shown[-3].startswith(line) and "web_fetch" in shown[-3] and "files__echo" in shown[-3]
    assert shown[-2] == "I can't use those here."
    assert all(r["is_error"] and r["content"].startswith("Unknown tool") for r in in_chat)
    # the job's session still advertises them (its cached bytes), and each call is refused
    taken = "may no longer be used here: the owner has taken its tool set"
    assert [(r["is_error"], r["content"]) for r in in_job] == [
        (True, f"The tool 'web_fetch' {taken} 'web' away."),
        (True, f"The tool 'files__echo' {taken} 'mcp' away."),
    ]
    assert shown[-1] == "Nothing to report."
    assert fake_web.paths() == []


async def test_an_mcp_server_removed_from_the_config_is_refused_and_its_chats_start_anew(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, mcp=MCP) as harness:
        fake.private_message(ADMIN, "hello")
        fake.private_message(ADMIN, "/cron add every 1d | Check the files")
        await harness.settled()
        job = await only_job(harness)
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        before = await latest(harness, ADMIN)
    assert "files__echo" in names(before)

    other = {"servers": {"notes": stdio_server(REPOSITORY)}}  # "files" is gone, another server runs
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, mcp=other) as harness:
        emulator.script(Reply(tool_calls=[ToolUse("files__echo", {"text": "hi"})]), Reply(text="Done."))
        assert await harness.gateway.scheduler.run_now(job.id) is RunStatus.OK
        [result] = tool_results(emulator.requests[-1])
        fake.private_message(ADMIN, "hello again")
        await harness.settled()
        after = await latest(harness, ADMIN)
        shown = harness.texts(ADMIN)

    assert result["is_error"] and result["content"] == (
        "The tool 'files__echo' may no longer be used: the MCP server 'files' was removed from the "
        "configuration."
    )
    assert after.id != before.id and "notes__echo" in names(after) and "files__echo" not in names(after)
    assert shown[-2].startswith("ℹ️ New session: tools this chat had are no longer allowed here (files__")
    assert shown[-1].startswith("Emulated reply")


async def test_an_admin_taken_off_the_admins_gets_a_new_session_with_one_line_and_their_jobs_pause(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeTelegram()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:
        fake.private_message(ADMIN, "hello")
        fake.private_message(ADMIN, "/cron add every 1d | Report on the servers")
        await harness.settled()
        job = await only_job(harness)
        before = await latest(harness, ADMIN)
    assert before.memory_scope == job.memory_scope == OWNER_SCOPE and job.enabled

    demoted: dict[str, Any] = {"gateway": {"admins": []}, "telegram": {"allowed_users": [FRIEND, ADMIN]}}
    caplog.set_level(logging.INFO)
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, **demoted) as harness:
        paused = await job_now(harness, job.id)
        asked = len(emulator.requests)
        assert await harness.gateway.scheduler.run_now(job.id) is None  # never runs for them
        assert len(emulator.requests) == asked
        fake.private_message(ADMIN, "hello again")
        await harness.settled()
        after = await latest(harness, ADMIN)
        shown = harness.texts(ADMIN)

    assert not paused.enabled
    assert f'paused job {job.id} "Report on the servers": telegram:{ADMIN} is no longer one of the bot' in (
        caplog.text
    )
    assert after.memory_scope == user_scope("telegram", str(ADMIN))
    assert shown[-2] == "ℹ️ New session: your access changed (you are no longer one of the bot's admins here)."
    assert shown[-1].startswith("Emulated reply")


async def approve_stranger(harness: Harness) -> None:
    """The stranger asks for access and an admin approves the code in their chat."""
    harness.fake.private_message(STRANGER, "hi")
    await harness.settled()
    [code] = await harness.gateway.services.pairing.pending()
    harness.fake.private_message(ADMIN, f"/approve {code.code}")
    await harness.settled()


async def test_a_pairing_revoked_mid_turn_refuses_the_turns_tools_its_sub_agents_included_and_pauses_jobs(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    revoked: list[str] = []

    async def revoke_when_the_sub_agent_starts(body: dict[str, Any]) -> None:
        if not revoked and CHILD_PREAMBLE[:40] in json.dumps(body["messages"][-1], ensure_ascii=False):
            revoked.append(await herald_cli("pairing", "revoke", "telegram", str(STRANGER)))

    note = ToolUse("memory", {"action": "add", "target": "user", "content": "Waters the plants on Sundays."})
    async with telegram_gateway(home, emulator, emulator_url) as harness:
        await approve_stranger(harness)
        harness.fake.private_message(STRANGER, "/cron add every 1d | Remind me to water the plants")
        await harness.settled()
        job = await only_job(harness)
        emulator.before_answer = revoke_when_the_sub_agent_starts
        emulator.script(
            Reply(tool_calls=[ToolUse("delegate", {"tasks": ["Plan the week."]})]),  # the turn
            Reply(tool_calls=[note]),  # the sub-agent, once the pairing is revoked
            Reply(text="I could not plan."),  # the sub-agent's answer
            Reply(tool_calls=[note]),  # the turn again
            Reply(text="Your week is planned."),
        )
        harness.fake.private_message(STRANGER, "plan my week")
        await harness.settled()
        emulator.before_answer = None
        results = [tool_results(request) for request in emulator.requests[-3:]]
        memory = harness.gateway.services.runtime.memory.store(user_scope("telegram", str(STRANGER)))
        remembered = await memory.read("user")
        paused = await job_now(harness, job.id)
        asked = len(emulator.requests)
        assert await harness.gateway.scheduler.run_now(job.id) is None
        assert len(emulator.requests) == asked
        shown = harness.texts(STRANGER)

    child, _, parent = results  # the sub-agent's memory write, the delegate call's outcome, the turn's
    assert [(r["is_error"], r["content"]) for r in child] == [(True, NO_ACCESS)]
    assert [(r["is_error"], r["content"]) for r in parent] == [(True, NO_ACCESS)]
    assert remembered == ""  # neither write happened
    assert "Your week is planned." not in shown and shown[1] == WELCOME  # nothing more reached them
    [printed] = revoked
    assert printed.splitlines() == [
        f"Revoked telegram:{STRANGER}.",
        "Paused 1 scheduled job(s) they made (they never run for them again unless resumed):",
        f'  {job.id}  "Remind me to water the plants"',
    ]
    assert not paused.enabled
    assert f"paused job {job.id}" in caplog.text


async def test_a_job_never_runs_or_posts_for_a_maker_who_lost_access_however_they_lost_it(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    fake = FakeTelegram()
    async with telegram_gateway(home, emulator, emulator_url, fake=fake) as harness:
        await approve_stranger(harness)
        fake.private_message(FRIEND, "/cron add every 1d | Summarise the news")
        fake.private_message(STRANGER, "/cron add every 1d | Remind me to stretch")
        await harness.settled()
        jobs = {job.creator.user_id: job for job in await harness.gateway.services.runtime.cron.jobs.all()
                if job.creator is not None}  # fmt: skip
        friends, strangers = jobs[str(FRIEND)], jobs[str(STRANGER)]

        async def revoke_during_the_run(body: dict[str, Any]) -> None:
            await harness.gateway.services.pairing.revoke("telegram", str(STRANGER))

        emulator.before_answer = revoke_during_the_run  # not `herald pairing revoke`: nothing paused it
        shown_before = harness.texts(STRANGER)
        assert await harness.gateway.scheduler.run_now(strangers.id) is RunStatus.FAILED
        emulator.before_answer = None
        await harness.settled()
        mid_run = await job_now(harness, strangers.id)
        shown_after = harness.texts(STRANGER)
        asked = len(emulator.requests)
        assert await harness.gateway.scheduler.run_now(strangers.id) is None
        assert len(emulator.requests) == asked

    # taken off the allowlist at a restart: the job pauses at start and never runs
    async with telegram_gateway(home, emulator, emulator_url, fake=fake, telegram={"allowed_users": []}) as h:
        at_start = await job_now(h, friends.id)
        assert await h.gateway.scheduler.run_now(friends.id) is None
        assert len(emulator.requests) == asked

    assert shown_after == shown_before  # the run's answer was not delivered
    assert not mid_run.enabled and mid_run.last_status is RunStatus.FAILED
    assert mid_run.last_error == (
        f'not delivered: paused job {strangers.id} "Remind me to stretch": telegram:{STRANGER} no longer '
        "has access to the bot"
    )
    assert not at_start.enabled
