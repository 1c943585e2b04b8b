"""A job runs only while the person who made it may still use the bot where it posts.

A job posts into a chat and spends the owner's money on its maker's behalf, so it stops when its maker
loses access (``herald pairing revoke``, taken off an allowlist) or, for a job with the owner's memory,
stops being an admin. The question (``gateway.rights.lost``) is asked at three moments, so no way of
taking access away is missed:

- ``herald pairing revoke`` pauses the person's jobs and says which (another process: the database is
  the only thing it shares with the gateway);
- every start of the gateway (and of a cluster's scheduler) pauses the jobs whose makers lost access in
  the configuration (removed from ``gateway.admins`` or an allowlist);
- every run asks again before it starts and before it posts (``gateway.cron.runner``): a job is never
  run or delivered for someone who lost access, whichever way they lost it.

A paused job stays in the table (``herald cron list`` shows it); the owner may resume it, and its next
run asks again. Jobs made on the command line or in the terminal, and jobs made before Herald recorded
makers, have no maker to ask about.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.access.auth import Authorizer
from gateway.cron.jobs import CronJob, CronJobs
from gateway.rights import Lost, lost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PausedJob:
    job: CronJob
    why: Lost

    def line(self) -> str:
        """One line for the command line and the log."""
        maker = self.job.creator.person if self.job.creator else "its maker"
        return f'paused job {self.job.id} "{self.job.name}": {maker} {self.why.value}'


async def lost_by_maker(job: CronJob, authorizer: Authorizer) -> Lost | None:
    """What ``job``'s maker lost that stops it running (None: it may run)."""
    return await lost(authorizer, job.creator, job.memory_scope)


async def pause_if_lost(jobs: CronJobs, job: CronJob, authorizer: Authorizer) -> PausedJob | None:
    """Pause ``job`` (if enabled) when its maker lost access; returns what was paused, and logs it."""
    why = await lost_by_maker(job, authorizer)
    if why is None:
        return None
    paused = PausedJob(job, why)
    if job.enabled:
        await jobs.set_enabled(job.id, False, job.next_run_at)
        log.warning("cron %s", paused.line())
    return paused


async def pause_lost(jobs: CronJobs, authorizer: Authorizer, *, person: str | None = None) -> list[PausedJob]:
    """Pause every enabled job (of ``person``, ``platform:user_id``, when given) whose maker lost access."""
    candidates = await jobs.for_creator(person) if person is not None else await jobs.all()
    paused = []
    for job in candidates:
        if job.enabled and (done := await pause_if_lost(jobs, job, authorizer)) is not None:
            paused.append(done)
    return paused
