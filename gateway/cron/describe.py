"""How a job reads for people and for the model: the same lines in a chat, a tool result and the CLI."""

from __future__ import annotations

import datetime as dt

from gateway.chats import chat_text
from gateway.cron.jobs import CronJob, DeliveryState, RunStatus
from gateway.cron.schedule import format_gap

PREVIEW_CHARS = 80


def when(timestamp: float, tz: dt.tzinfo) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz).strftime("%Y-%m-%d %H:%M %Z").strip()


def _runs_left(job: CronJob) -> str:
    if job.repeat is None:
        return "repeats until removed"
    return f"{job.repeat} run{'s' if job.repeat != 1 else ''} left"


def batch_text(job: CronJob) -> str:
    """How its runs are sent: ", batch (half price, within 2h)" for a batch job, else nothing."""
    if not job.batch:
        return ""
    within = f", within {format_gap(dt.timedelta(seconds=job.batch_deadline))}" if job.batch_deadline else ""
    return f", batch (half price{within})"


def state_line(job: CronJob, tz: dt.tzinfo) -> str:
    if job.enabled:
        upcoming = f"next {when(job.next_run_at, tz)}" if job.next_run_at else "no next run"
        return f"active, {upcoming}, {_runs_left(job)}{batch_text(job)}"
    if job.repeat == 0:
        return "finished (no runs left)"
    return f"paused, {_runs_left(job)}"


def delivery_text(job: CronJob) -> str:
    """Where the last answer is: sent, still being retried, or given up on (with the platform's error)."""
    if job.delivery is None:
        return "not queued"
    if job.delivery is DeliveryState.SENT:
        return "sent"
    reason = f": {job.delivery_error}" if job.delivery_error else ""
    if job.delivery is DeliveryState.PENDING:
        return f"pending (retrying{reason})" if reason else "pending"
    return f"FAILED{reason}"


def last_run_line(job: CronJob, tz: dt.tzinfo) -> str:
    if job.last_run_at is None and job.last_status is None:
        return "not run yet"
    at = f"last run {when(job.last_run_at, tz)}" if job.last_run_at else "last run"
    status = job.last_status
    if status is RunStatus.OK:
        return f"{at}: answered, delivery {delivery_text(job)}"
    if status is RunStatus.SILENT:
        return f"{at}: answered [SILENT], nothing sent"
    if status is RunStatus.FAILED:
        return f"{at}: failed: {job.last_error}; error message delivery {delivery_text(job)}"
    if status is RunStatus.MISSED:
        return f"missed: {job.last_error}"
    if status is RunStatus.INTERRUPTED:
        return f"{at}: interrupted ({job.last_error})"
    return f"{at}: running"


def preview(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1].rstrip() + "…"


def describe(job: CronJob, tz: dt.tzinfo) -> str:
    """Three or four lines: id, name, schedule and target; state; the last run; the last answer."""
    lines = [
        f"{job.id}  {job.name}  [{job.schedule}] → {chat_text(job.target)}",
        f"  {state_line(job, tz)}",
        f"  {last_run_line(job, tz)}",
    ]
    if job.last_output and job.last_status is RunStatus.OK:
        lines.append(f"  answer: {preview(job.last_output)}")
    return "\n".join(lines)


def describe_all(jobs: list[CronJob], tz: dt.tzinfo, *, empty: str) -> str:
    return "\n".join(describe(job, tz) for job in jobs) if jobs else empty


def created(job: CronJob, tz: dt.tzinfo) -> str:
    """The one line that confirms a new job."""
    upcoming = f"first run {when(job.next_run_at, tz)}" if job.next_run_at else "no run scheduled"
    return (
        f'Created job {job.id} "{job.name}" [{job.schedule}{batch_text(job)}]: {upcoming}, '
        f"posts to {chat_text(job.target)}."
    )
