"""The job table and who may do what with it: no gateway, no model, a state.db on disk."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.base import ChatAddress
from agent.history import unanswered_turn
from agent.memory import OWNER_SCOPE, chat_scope, user_scope
from agent.model.messages import Message, ToolCall
from gateway.cron.jobs import CronJobs, RunStatus
from gateway.cron.manage import COMMAND_LINE, Caller, CronError, CronManager
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.timezones import resolve_timezone

ALICE = Caller("telegram:dm:2", user_scope("telegram", "2"), ChatAddress("telegram", "2"))
GROUP = Caller("telegram:group:-100", chat_scope("telegram", "-100"), ChatAddress("telegram", "-100"))
OWNER = Caller("telegram:dm:1", OWNER_SCOPE, ChatAddress("telegram", "1"))


@pytest.fixture
async def manager(home: HeraldHome) -> AsyncIterator[CronManager]:
    async with open_home_storage(home) as storage:
        yield CronManager(CronJobs(storage), resolve_timezone("UTC"))


async def test_a_job_posts_into_the_chat_it_was_made_in_with_that_chats_memory(manager: CronManager) -> None:
    job = await manager.create(GROUP, prompt="  Morning digest  ", schedule="0 8 * * 1-5")
    assert job.target == GROUP.chat and job.memory_scope == GROUP.memory_scope
    assert (job.name, job.prompt, job.repeat, job.origin_key) == ("Morning digest", "Morning digest", None,
                                                                  "telegram:group:-100")  # fmt: skip
    once = await manager.create(ALICE, prompt="stretch", schedule="in 30m", repeat=5)
    assert once.repeat == 1  # a one-shot runs once whatever repeat says


async def test_only_the_owner_posts_elsewhere_and_sees_other_chats_jobs(manager: CronManager) -> None:
    with pytest.raises(CronError, match="only post into this chat"):
        await manager.create(ALICE, prompt="spam", schedule="every 1h", target="telegram:-100")
    with pytest.raises(CronError, match="give a target such as telegram:12345"):
        await manager.create(COMMAND_LINE, prompt="report", schedule="every 1h")
    with pytest.raises(CronError, match="is not a chat"):
        await manager.create(OWNER, prompt="report", schedule="every 1h", target="group-chat")
    mine = await manager.create(ALICE, prompt="water", schedule="every 2h", target="telegram:2")
    theirs = await manager.create(OWNER, prompt="report", schedule="every 1d", target="telegram:-100")
    assert [j.id for j in await manager.visible(ALICE)] == [mine.id]
    assert [j.id for j in await manager.visible(GROUP)] == [theirs.id]  # it posts there
    assert {j.id for j in await manager.visible(COMMAND_LINE)} == {mine.id, theirs.id}
    with pytest.raises(CronError, match=f"no job '{theirs.id}' in this chat"):
        await manager.remove(ALICE, theirs.id)
    await manager.pause(OWNER, mine.id)
    with pytest.raises(CronError, match="paused or finished; resume it first"):
        await manager.run_now(ALICE, mine.id)
    resumed = await manager.resume(ALICE, mine.id.upper())  # ids are read case-insensitively
    assert resumed.enabled and resumed.version > mine.version


async def test_invalid_input_is_refused_with_one_sentence(manager: CronManager) -> None:
    for kwargs, message in (
        ({"prompt": " ", "schedule": "every 1h"}, "A job needs a prompt"),
        ({"prompt": "x", "schedule": "every 1h", "repeat": 0}, "repeat is the number of runs"),
        ({"prompt": "x", "schedule": "2020-01-01T08:00"}, "is in the past"),
        ({"prompt": "x", "schedule": "daily"}, "'daily' is not a schedule I can use"),
    ):
        with pytest.raises(CronError, match=message):
            await manager.create(ALICE, **kwargs)
    assert await manager.visible(ALICE) == []


async def test_a_run_claims_a_due_job_once_and_repeat_counts_runs_down(manager: CronManager) -> None:
    jobs = manager.jobs
    job = await manager.create(ALICE, prompt="twice", schedule="every 1h", repeat=2)
    assert await jobs.claim(job.id, job.next_run_at) is None  # not due yet
    await jobs.mark_due(job.id)
    first = await jobs.claim(job.id, 111.0)
    assert first is not None and first.repeat == 1 and first.enabled and first.next_run_at == 111.0
    assert first.last_status is RunStatus.RUNNING
    assert await jobs.claim(job.id, 222.0) is not None  # 111 is in the past: due
    assert await jobs.claim(job.id, 333.0) is None  # used up
    done = await jobs.get(job.id)
    assert done is not None and not done.enabled and done.repeat == 0 and done.next_run_at is None
    await jobs.finish(job.id, RunStatus.OK, output="x" * 10_000, delivery=[99])
    finished = await jobs.get(job.id)
    assert finished is not None and len(finished.last_output or "") == 4000
    assert finished.delivery is None  # outbox item 99 does not exist: nothing claims it was sent
    with pytest.raises(CronError, match="used up its runs"):
        await manager.resume(ALICE, job.id)


def test_a_run_cut_off_by_a_crash_is_found_for_closing() -> None:
    """A job's session is settled like any other (``Agent.hygiene`` and ``run_turn``)."""
    call = ToolCall("t1", "todo", "{}")
    done = [Message("user", "run 1"), Message("assistant", "answer 1")]
    assert unanswered_turn(done) == []
    assert unanswered_turn([]) == []
    cut = [Message("user", "run 2"), Message("assistant", "", tool_calls=(call,)), Message("tool", "ok")]
    assert unanswered_turn([*done, *cut]) == cut
    assert unanswered_turn([*done, Message("user", "run 2")]) == [Message("user", "run 2")]
