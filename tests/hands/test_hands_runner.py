"""Commands on this machine: output capped to head and tail, timeouts and cancellation end the whole
process tree, leftovers of a finished shell are stopped, background jobs are listed and stopped."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from agent.hands.jobs import BackgroundJobs, TooManyJobs
from agent.hands.output import CappedOutput
from agent.hands.processes import alive
from agent.hands.runner import LocalRunner, run_command
from tests.fakes.waiting import Waiter

pytestmark = pytest.mark.timeout(60)
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


async def gone(*pids: int, timeout: float = 10.0) -> None:  # noqa: ASYNC109 - bounded wait
    """Wait until none of ``pids`` runs (a zombie counts as gone: it only waits to be reaped)."""
    waiter = Waiter(threading.Lock(), lambda: f"still running: {[p for p in pids if alive(p)]}")
    await waiter.wait_for(lambda: not any(alive(pid) for pid in pids), timeout, "the processes to end")


async def pids_from(path: Path, count: int) -> list[int]:
    """The process ids a command wrote into ``path``, once it wrote ``count`` of them."""

    def written() -> list[int]:
        found = path.read_text().split() if path.exists() else []
        return [int(pid) for pid in found] if len(found) >= count else []

    waiter = Waiter(threading.Lock(), lambda: f"{path} holds {path.read_text() if path.exists() else '-'}")
    return await waiter.wait_for(written, 10.0, f"{count} pids in {path}")


def test_capped_output_keeps_the_head_and_the_tail_and_counts_the_rest() -> None:
    output = CappedOutput(14)
    for chunk in (b"start", b"-middle-" * 1000, b"the end"):
        output.feed(chunk)
    text = output.text()
    assert text.startswith("start") and text.endswith("the end")
    assert output.total == 5 + 8000 + 7 and output.cut == output.total - 14
    assert f"{output.cut:,} bytes cut" in text


async def test_a_command_runs_in_its_folder_with_its_environment(tmp_path: Path) -> None:
    result = await run_command(
        LocalRunner(),
        "pwd; echo $GREETING; echo oops >&2; exit 3",
        cwd=tmp_path,
        env={**ENV, "GREETING": "hello"},
        timeout=10,
        limit=1000,
    )
    assert result.exit_code == 3 and not result.timed_out
    assert result.stdout.text() == f"{tmp_path}\nhello\n"
    assert result.stderr.text() == "oops\n"


async def test_ten_megabytes_of_output_are_cut_to_head_and_tail(tmp_path: Path) -> None:
    command = "echo FIRST; head -c 10000000 /dev/zero | tr '\\0' x; echo; echo LAST"
    result = await run_command(LocalRunner(), command, cwd=tmp_path, env=ENV, timeout=30, limit=4000)
    assert result.exit_code == 0
    assert result.stdout.total > 10_000_000
    text = result.stdout.text()
    assert text.startswith("FIRST\n") and text.endswith("LAST\n")
    assert len(text) < 4100 and "bytes cut" in text


async def test_a_command_past_its_timeout_is_stopped_with_everything_it_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"sleep 1000 & echo $! >> {pids}; echo $$ >> {pids}; sleep 1000"
    task = asyncio.create_task(
        run_command(LocalRunner(), command, cwd=tmp_path, env=ENV, timeout=1.0, limit=1000)
    )
    shell, child = sorted(await pids_from(pids, 2))
    result = await task
    assert result.timed_out and result.exit_code is None
    await gone(shell, child)


async def test_a_cancelled_command_is_killed_at_once_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"(trap '' TERM; sleep 1000) & echo $! >> {pids}; echo $$ >> {pids}; wait"
    task = asyncio.create_task(
        run_command(LocalRunner(), command, cwd=tmp_path, env=ENV, timeout=600, limit=1000)
    )
    found = await pids_from(pids, 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await gone(*found)


async def test_what_a_finished_command_left_running_is_stopped(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result = await run_command(
        LocalRunner(),
        f"sleep 1000 > /dev/null 2>&1 & echo $! > {pids}; echo started",
        cwd=tmp_path,
        env=ENV,
        timeout=10,
        limit=1000,
    )
    assert result.exit_code == 0 and result.stdout.text() == "started\n"
    await gone(*await pids_from(pids, 1))


async def test_background_jobs_are_listed_read_and_stopped_per_chat(tmp_path: Path) -> None:
    jobs = BackgroundJobs(limit=1, output_limit=1000)
    runner = LocalRunner()
    job = await jobs.start(runner, "echo ready; sleep 1000", session_key="chat-a", cwd=tmp_path, env=ENV)
    waiter = Waiter(threading.Lock(), lambda: job.stdout.text())
    await waiter.wait_for(lambda: job.stdout.text() == "ready\n", 10, "the job's output")
    assert [j.id for j in jobs.of("chat-a")] == [job.id] and jobs.of("chat-b") == []
    assert job.running and jobs.find("chat-b", job.id) is None
    with pytest.raises(TooManyJobs):
        await jobs.start(runner, "sleep 1", session_key="chat-a", cwd=tmp_path, env=ENV)
    other = await jobs.start(runner, "sleep 1000", session_key="chat-b", cwd=tmp_path, env=ENV)
    assert await jobs.stop_chat("chat-a") == 1
    assert not job.running and job.stopped and job.status() == "stopped"
    await gone(job.process.pid)
    assert other.running
    await jobs.aclose()
    assert not other.running
    await gone(other.process.pid)
    with pytest.raises(TooManyJobs):
        await jobs.start(runner, "true", session_key="chat-b", cwd=tmp_path, env=ENV)
