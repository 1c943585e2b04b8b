"""Commands left running in the background (``terminal(background=true)``): listed, read, stopped.

Each job belongs to the chat that started it (its session key). ``/stop`` in that chat stops its jobs
with its answer, and shutdown stops them all: nothing Herald started outlives it unnoticed. Their
output is kept like a command's (head and tail, ``agent.hands.output``) while they run and after. A
job lives in the process that started it: in a cluster, another process neither lists nor stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.hands.output import CappedOutput, pump
from agent.hands.quota import Watch, WorkspaceQuota, unwatch
from agent.hands.runner import DRAIN_SECONDS, Process, Runner, spawn

log = logging.getLogger(__name__)

KEEP_FINISHED = 10  # ended jobs a chat keeps listed (their output too), the oldest dropped first


@dataclass
class Job:
    id: int
    session_key: str
    command: str
    process: Process
    stdout: CappedOutput
    stderr: CappedOutput
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    stopped: bool = False  # ended by Herald (/stop, the jobs tool, shutdown), not by itself
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    quota: Watch | None = field(default=None, repr=False)  # the workspace's quota, while it runs

    @property
    def running(self) -> bool:
        return self.ended_at is None

    def status(self) -> str:
        if self.running:
            return f"running for {_duration(time.time() - self.started_at)}"
        if self.quota is not None and self.quota.reason is not None:
            return f"stopped: {self.quota.reason}"
        if self.stopped:
            return "stopped"
        return f"exited with {self.exit_code}"


class TooManyJobs(Exception):
    """The chat runs as many background jobs as it may (``tools.max_background``)."""


class BackgroundJobs:
    """Every background job of this process, by chat."""

    def __init__(self, *, limit: int, output_limit: int) -> None:
        self.limit = limit
        self.output_limit = output_limit
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._closed = False

    async def start(
        self,
        runner: Runner,
        command: str,
        *,
        session_key: str,
        cwd: Path,
        env: Mapping[str, str],
        quota: WorkspaceQuota | None = None,
    ) -> Job:
        """Start ``command`` for the chat ``session_key``; raises :class:`TooManyJobs` or ``OSError``.
        With ``quota``, the job is stopped if the workspace grows past it while it runs."""
        if self._closed:
            raise TooManyJobs("Herald is shutting down; no command can start in the background now.")
        running = [job for job in self.of(session_key) if job.running]
        if len(running) >= self.limit:
            raise TooManyJobs(
                f"This chat already runs {len(running)} background command(s), the most it may "
                f"(tools.max_background); stop one first."
            )
        process = await spawn(runner, command, cwd=cwd, env=env)
        job = Job(
            id=next(self._ids),
            session_key=session_key,
            command=command,
            process=process,
            stdout=CappedOutput(self.output_limit),
            stderr=CappedOutput(self.output_limit),
            started_at=time.time(),
            quota=quota.watch(process) if quota is not None else None,
        )
        job.task = asyncio.create_task(self._watch(job), name=f"background job {job.id}")
        self._jobs[job.id] = job
        self._forget_old(session_key)
        return job

    def of(self, session_key: str) -> list[Job]:
        """The chat's jobs, oldest first."""
        return [job for job in self._jobs.values() if job.session_key == session_key]

    def find(self, session_key: str, job_id: int) -> Job | None:
        job = self._jobs.get(job_id)
        return job if job is not None and job.session_key == session_key else None

    async def stop(self, job: Job) -> None:
        """End the job and what it started; returns once it ended."""
        if not job.running:
            return
        job.stopped = True
        await job.process.stop()
        if job.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await job.task

    async def stop_chat(self, session_key: str) -> int:
        """Stop every running job of the chat (``/stop``); returns how many there were."""
        running = [job for job in self.of(session_key) if job.running]
        await asyncio.gather(*(self.stop(job) for job in running))
        return len(running)

    async def aclose(self) -> None:
        """Stop every job (shutdown); no new one starts after this."""
        self._closed = True
        running = [job for job in self._jobs.values() if job.running]
        if running:
            log.info("stopping %d background command(s)", len(running))
        await asyncio.gather(*(self.stop(job) for job in running))

    async def _watch(self, job: Job) -> None:
        reading = asyncio.gather(pump(job.process.stdout, job.stdout), pump(job.process.stderr, job.stderr))
        try:
            job.exit_code = await job.process.wait()
            await job.process.stop()  # what it left behind when its shell exited
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_SECONDS):
                    await asyncio.shield(reading)
        except BaseException:
            job.process.kill_now()
            raise
        finally:
            job.ended_at = time.time()
            await unwatch(job.quota)
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reading

    def _forget_old(self, session_key: str) -> None:
        ended = [job for job in self.of(session_key) if not job.running]
        for job in ended[: max(0, len(ended) - KEEP_FINISHED)]:
            del self._jobs[job.id]


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h {seconds % 3600 // 60}m"
