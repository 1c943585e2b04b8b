"""The agent's ``cron`` tool: create, list, pause, resume, run now and remove scheduled jobs.

Its description and guidance are fixed text: the tool list is part of the prompt prefix every chat of
the bot shares (docs/ARCHITECTURE.md, cache invariant 2), so nothing about the calling chat appears in it.
Who the caller is — their chat and whether they are the owner — comes from the calling session at call
time. Inside a job's own run the tool is refused by the loop (no job creates jobs), not removed: the
run's tool list stays the bytes the cache holds.
"""

from __future__ import annotations

from typing import Any

from agent.api import Tool, ToolContext, ToolError
from gateway.chats import chat_of_session_key
from gateway.cron.describe import created, describe_all
from gateway.cron.manage import Caller, Change, CronError, CronManager, change_job
from gateway.rights import Rights

NAME = "cron"
TOOLSET = "cron"
ACTIONS = ("create", "list", "pause", "resume", "run_now", "remove")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "schedule": {
            "type": "string",
            "description": "create: 5 cron fields ('0 8 * * 1-5'), 'every 2h', 'in 30m' (once) or an ISO "
            "time ('2026-12-01T08:00', once).",
        },
        "prompt": {
            "type": "string",
            "description": "create: the instruction each run answers, written to stand on its own.",
        },
        "name": {"type": "string", "description": "create: a short name (default: from the prompt)."},
        "target": {
            "type": "string",
            "description": "create: chat to post into as platform:chat_id[:thread_id]; default: this chat.",
        },
        "repeat": {
            "type": "integer",
            "minimum": 1,
            "description": "create: number of runs, then the job stops (default: until removed).",
        },
        "batch": {
            "type": "boolean",
            "description": "create: true for work that can wait (a digest, a report): its runs cost half, "
            "answered within batch_deadline.",
        },
        "batch_deadline": {
            "type": "number",
            "description": "create, with batch: seconds a run may wait (60 to 86400; default 7200).",
        },
        "job_id": {"type": "string", "description": "pause, resume, run_now, remove: the job's id."},
    },
    "required": ["action"],
}


async def caller_of(context: ToolContext) -> Caller:
    """Who calls: the session's chat and memory, and the person the turn answers (the gate of a gateway
    turn, ``gateway.rights``, knows them)."""
    session = await context.store.sessions.get(context.session_id)
    if session is None:
        raise ToolError("This session is gone; scheduled jobs cannot be managed from it.")
    rights = context.gate if isinstance(context.gate, Rights) else None
    speaker = rights.speaker if rights is not None else None
    admin = rights is not None and speaker is not None and rights.authorizer.is_admin(
        speaker.platform, speaker.user_id
    )
    chat = chat_of_session_key(session.session_key)
    return Caller(session.session_key, session.memory_scope, chat, creator=speaker, admin=admin)


def _text(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(f"'{name}' must be a string.")
    return value


def cron_tool(manager: CronManager) -> Tool:
    """The tool, bound to the job manager of this process."""
    tz = manager.timezone

    async def handle(args: dict[str, Any], context: ToolContext) -> str:
        action = args.get("action")
        if action not in ACTIONS:
            raise ToolError(f"'action' must be one of {', '.join(ACTIONS)}.")
        caller = await caller_of(context)
        try:
            if action == "create":
                repeat = args.get("repeat")
                if repeat is not None and (not isinstance(repeat, int) or isinstance(repeat, bool)):
                    raise ToolError("'repeat' must be a whole number of runs.")
                batch = args.get("batch", False)
                if not isinstance(batch, bool):
                    raise ToolError("'batch' must be true or false.")
                deadline = args.get("batch_deadline")
                if deadline is not None and (
                    not isinstance(deadline, int | float) or isinstance(deadline, bool)
                ):
                    raise ToolError("'batch_deadline' must be a number of seconds.")
                job = await manager.create(
                    caller,
                    prompt=_text(args, "prompt") or "",
                    schedule=_text(args, "schedule") or "",
                    name=_text(args, "name"),
                    target=_text(args, "target"),
                    repeat=repeat,
                    batch=batch,
                    batch_deadline=None if deadline is None else float(deadline),
                )
                return created(job, tz)
            if action == "list":
                jobs = await manager.visible(caller)
                return describe_all(jobs, tz, empty="No scheduled jobs.")
            job_id = _text(args, "job_id")
            if not job_id:
                raise ToolError(f"'{action}' needs 'job_id' (list the jobs to see their ids).")
            change: Change = "run" if action == "run_now" else action
            return await change_job(manager, caller, change, job_id)
        except CronError as error:
            raise ToolError(str(error)) from None

    return Tool(
        name=NAME,
        description=(
            "Scheduled jobs: each run is a separate agent turn that answers the job's prompt and posts "
            "the answer to a chat. Actions: create, list, pause, resume, run_now, remove."
        ),
        input_schema=SCHEMA,
        handler=handle,
        guidance=(
            "cron: for reminders and recurring work, create a job whose prompt says what to do at run "
            "time; a run that has nothing worth posting answers exactly [SILENT]."
        ),
        toolset=TOOLSET,
    )
