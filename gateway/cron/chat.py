"""``/cron`` in a chat: list this chat's jobs, add one, pause, resume, run or remove one by id.

    /cron                                   this chat's jobs
    /cron add every 2h | summarise my feeds  a job that posts here
    /cron batch 0 7 * * * | the daily digest a job that can wait: half price through the batch API
    /cron pause|resume|run|remove ID

The same rules as the ``cron`` tool (``manage``): a job added here posts here and uses this chat's
memory; only the owner may touch jobs that post elsewhere.
"""

from __future__ import annotations

from adapters.registry import EXAMPLE
from gateway.cron.describe import created, describe_all
from gateway.cron.manage import CHANGES, Caller, CronError, CronManager, change_job

USAGE = (
    "Usage: /cron (this chat's jobs) · /cron add SCHEDULE | PROMPT · /cron batch SCHEDULE | PROMPT (half "
    "price, answered within hours) · /cron pause|resume|run|remove ID. "
    "Schedules: '0 8 * * 1-5' (cron), 'every 2h', 'in 30m', '2026-12-01T08:00'."
)

NO_CHAT_HERE = (
    "The terminal has no chat to post into: add the job with `herald cron add --target "
    f"{EXAMPLE}:CHAT_ID --schedule SCHEDULE PROMPT`, or ask me to create it with a target."
)


async def cron_command(manager: CronManager, caller: Caller, args: str) -> str:
    """The reply to ``/cron ARGS``."""
    tz = manager.timezone
    verb, _, rest = args.strip().partition(" ")
    verb = verb.lower()
    rest = rest.strip()
    try:
        if verb in ("", "list"):
            if caller.chat is None:  # the terminal: the owner's view, every job
                return describe_all(await manager.visible(caller), tz, empty="No scheduled jobs. " + USAGE)
            jobs = await manager.jobs.for_chat(caller.chat)
            return describe_all(jobs, tz, empty="No scheduled jobs post into this chat. " + USAGE)
        if verb in ("add", "batch") and caller.chat is None:
            return NO_CHAT_HERE
        if verb in ("add", "batch"):
            schedule, bar, prompt = rest.partition("|")
            if not bar or not prompt.strip():
                example = f"/cron {verb} 0 8 * * 1-5 | summarise my feeds"
                return f"Write /cron {verb} SCHEDULE | PROMPT, e.g. {example}."
            job = await manager.create(caller, prompt=prompt, schedule=schedule, batch=verb == "batch")
            return created(job, tz)
        for change in CHANGES:
            if verb == change and rest:
                return await change_job(manager, caller, change, rest)
    except CronError as error:
        return str(error)
    return USAGE
