"""The ``terminal`` tool (a shell command in the workspace) and the ``jobs`` tool (background commands).

A command the approval rules hold (``agent.hands.rules``) waits for the owner's answer through the
turn's approver (``agent.tools.approval``); the model is told what happened in the tool's result. Every
command is in the audit before it starts and completed when it ends (``agent.store.audit``).
Descriptions and guidance are fixed text: the tool list is part of the prompt every owner's chat
shares (docs/ARCHITECTURE.md, cache invariant 2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.hands.jobs import BackgroundJobs, Job, TooManyJobs
from agent.hands.quota import WorkspaceQuota
from agent.hands.rules import Judge
from agent.hands.runner import Runner, RunResult, run_command
from agent.store.audit import AuditEntry, Outcome
from agent.tools.approval import Answer, ApprovalRequest, Finding, Verdict, outcome_for_model
from agent.tools.registry import Tool, ToolContext, ToolError

log = logging.getLogger(__name__)

TOOLSET = "terminal"
VERDICT_OUTCOMES = {
    Verdict.APPROVED_ONCE: Outcome.APPROVED_ONCE,
    Verdict.APPROVED_SESSION: Outcome.APPROVED_SESSION,
    Verdict.GRANTED: Outcome.GRANTED,
    Verdict.DENIED: Outcome.DENIED,
    Verdict.EXPIRED: Outcome.EXPIRED,
    Verdict.NOBODY: Outcome.NOBODY,
}


@dataclass(frozen=True)
class TerminalSettings:
    timeout: float  # tools.terminal_timeout
    max_timeout: float  # tools.terminal_max_timeout
    output_limit: int  # tools.output_limit
    approval_timeout: float  # tools.approval_timeout


@dataclass
class Terminal:
    """What the terminal tools run with: where, how, and what they may not do without asking."""

    settings: TerminalSettings
    judge: Judge
    runner: Runner
    jobs: BackgroundJobs
    workspace: Path
    env: Mapping[str, str]
    quota: WorkspaceQuota | None = None  # tools.workspace_quota_mb, watched while commands run

    def tools(self) -> list[Tool]:
        return [self._terminal_tool(), self._jobs_tool()]

    # --- terminal ---------------------------------------------------------------------------------

    async def run(self, args: dict[str, Any], context: ToolContext) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("'command' must be the shell command to run, as text.")
        background = args.get("background", False)
        if not isinstance(background, bool):
            raise ToolError("'background' must be true or false.")
        timeout, capped = self.timeout_for(args.get("timeout"))
        entry = self.entry(context, "terminal", command)
        await self.approve(entry, self.judge.findings(command), context)
        if background:
            return await self._background(command, entry, context)
        result = await self.execute(entry, command, cwd=self.workspace, timeout=timeout, context=context)
        return report(result, timeout, capped)

    def entry(self, context: ToolContext, tool: str, action: str) -> AuditEntry:
        """The audit row of ``action`` (what will run) by ``tool`` in this turn, before anything happened."""
        person = context.approver.person if context.approver is not None else None
        return AuditEntry(
            context.session_key,
            context.session_id,
            tool,
            action,
            Outcome.RUNNING,
            person=person,
            runner=self.runner.name,
        )

    async def approve(self, entry: AuditEntry, findings: tuple[Finding, ...], context: ToolContext) -> None:
        """Hold ``entry``'s action for the owner's yes when there are ``findings``; a ToolError telling the
        model what happened when it may not run."""
        if not findings:
            return
        request = ApprovalRequest(context.session_id, context.session_key, entry.tool, entry.action, findings)
        if context.approver is None:
            verdict, by, code = Verdict.NOBODY, None, None
        else:
            answer = await context.approver.ask(request)
            verdict, by, code = answer.verdict, answer.by, answer.code
        if verdict in (Verdict.NOBODY, Verdict.GRANTED):  # the approver records what it decided
            why = "; ".join(finding.what for finding in findings)
            await context.store.audit.record(
                _with(entry, outcome=VERDICT_OUTCOMES[verdict], detail=why, code=code, decided_by=by)
            )
        if not verdict.approved:
            answer = Answer(verdict, by, code)
            raise ToolError(outcome_for_model(answer, request, self.settings.approval_timeout))

    async def execute(
        self,
        entry: AuditEntry,
        command: str,
        *,
        cwd: Path,
        timeout: float,  # noqa: ASYNC109 - the command's own limit, not a wait of ours
        context: ToolContext,
    ) -> RunResult:
        """Run ``command`` in ``cwd`` to its end or timeout, in the audit from its start to its end."""
        audit_id = await context.store.audit.begin(entry)
        try:
            result = await run_command(
                self.runner,
                command,
                cwd=cwd,
                env=self.env,
                timeout=timeout,
                limit=self.settings.output_limit,
                quota=self.quota,
            )
        except OSError as error:
            await context.store.audit.finish(audit_id, Outcome.FAILED, detail=str(error))
            raise ToolError(f"The command could not be started: {error.strerror or error}.") from None
        except BaseException:
            await _finish_shielded(context, audit_id)
            raise
        outcome = Outcome.TIMED_OUT if result.timed_out else Outcome.RAN
        await context.store.audit.finish(
            audit_id, outcome, detail=_summary(result), exit_code=result.exit_code
        )
        return result

    def timeout_for(self, raw: object) -> tuple[float, bool]:
        """The command's timeout, and whether the model asked for more than allowed."""
        if raw is None:
            return self.settings.timeout, False
        if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
            raise ToolError("'timeout' must be a number of seconds above 0.")
        if raw > self.settings.max_timeout:
            return self.settings.max_timeout, True
        return float(raw), False

    async def _background(self, command: str, entry: AuditEntry, context: ToolContext) -> str:
        try:
            job = await self.jobs.start(
                self.runner,
                command,
                session_key=context.session_key,
                cwd=self.workspace,
                env=self.env,
                quota=self.quota,
            )
        except TooManyJobs as refusal:
            await context.store.audit.record(_with(entry, outcome=Outcome.FAILED, detail=str(refusal)))
            raise ToolError(str(refusal)) from None
        except OSError as error:
            await context.store.audit.record(_with(entry, outcome=Outcome.FAILED, detail=str(error)))
            raise ToolError(f"The command could not be started: {error.strerror or error}.") from None
        await context.store.audit.record(
            _with(entry, outcome=Outcome.STARTED, detail=f"background job {job.id}, pid {job.process.pid}")
        )
        return (
            f"Started in the background as job {job.id}. Read its output with jobs(action='output', "
            f"job_id={job.id}); it is stopped by /stop and when Herald stops."
        )

    def _terminal_tool(self) -> Tool:
        settings = self.settings
        others = (
            "a command that could do harm (deleting, sudo, installing, writing outside the workspace ...)"
            if self.judge.sandboxed
            else "any other command"
        )
        return Tool(
            name="terminal",
            description=(
                "Run a shell command (bash) on the owner's machine, in the workspace folder. Returns the "
                "exit code and the output (long output keeps its start and end). Commands that read or "
                "list inside the workspace (ls, cat, grep, wc, git status/diff/log ..., plain words, no $ "
                f"or substitutions) run at once; {others} waits for the owner's approval first, so "
                "prefer the file tools and plain reading commands. No input can be typed: pass -y and "
                "the like."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout": {
                        "type": "number",
                        "description": f"Seconds before it is stopped (default {settings.timeout:g}, at "
                        f"most {settings.max_timeout:g}).",
                    },
                    "background": {
                        "type": "boolean",
                        "description": "Start it and return at once, for servers and long jobs (see the "
                        "jobs tool).",
                    },
                },
                "required": ["command"],
            },
            handler=self.run,
            guidance=(
                "terminal: for facts about the machine and for work on files, run commands; prefer one "
                "command that shows the answer over several; if a command is denied, do not work around it."
            ),
            toolset=TOOLSET,
        )

    # --- jobs -------------------------------------------------------------------------------------

    async def manage(self, args: dict[str, Any], context: ToolContext) -> str:
        action = args.get("action", "list")
        if action == "list":
            jobs = self.jobs.of(context.session_key)
            if not jobs:
                return "No background commands in this chat."
            return "\n".join(f"job {job.id}: {job.status()} - {job.command}" for job in jobs)
        if action not in ("output", "stop"):
            raise ToolError("'action' must be list, output or stop.")
        job = self._job(args, context)
        if action == "stop":
            await self.jobs.stop(job)
            await context.store.audit.record(
                AuditEntry(
                    context.session_key,
                    context.session_id,
                    "jobs",
                    job.command,
                    Outcome.STOPPED,
                    detail=f"background job {job.id}",
                    runner=self.runner.name,
                )
            )
            return f"Job {job.id} stopped.\n{_job_output(job)}"
        return f"Job {job.id}: {job.status()}.\n{_job_output(job)}"

    def _job(self, args: dict[str, Any], context: ToolContext) -> Job:
        job_id = args.get("job_id")
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise ToolError("'job_id' must be the number of a job (action 'list' shows them).")
        job = self.jobs.find(context.session_key, job_id)
        if job is None:
            raise ToolError(f"This chat has no background job {job_id} (action 'list' shows them).")
        return job

    def _jobs_tool(self) -> Tool:
        return Tool(
            name="jobs",
            description="Background commands of this chat (started with terminal background=true): list "
            "them, read one's output so far, or stop one.",
            input_schema={
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["list", "output", "stop"]},
                    "job_id": {"type": "integer", "description": "output, stop: the job's number."},
                },
                "required": ["action"],
            },
            handler=self.manage,
            guidance="",
            toolset=TOOLSET,
        )


def _with(entry: AuditEntry, **changes: Any) -> AuditEntry:
    return replace(entry, **changes)


async def _finish_shielded(context: ToolContext, audit_id: int) -> None:
    """The run was cancelled (``/stop``, shutdown): record that, even while being cancelled."""
    try:
        await asyncio.shield(context.store.audit.finish(audit_id, Outcome.STOPPED, detail="stopped"))
    except (asyncio.CancelledError, Exception):  # the row stays "running": the audit still shows it
        log.info("the audit row %d of a stopped command could not be completed", audit_id)


def _summary(result: RunResult) -> str:
    if result.stopped_because is not None:
        return f"stopped after {result.seconds:.1f} s: {result.stopped_because}"
    if result.timed_out:
        return f"stopped at its timeout after {result.seconds:.1f} s"
    cut = result.stdout.cut + result.stderr.cut
    return f"{result.seconds:.1f} s, {result.stdout.total + result.stderr.total:,} bytes of output" + (
        f" ({cut:,} cut)" if cut else ""
    )


def report(result: RunResult, timeout: float, capped: bool) -> str:
    """The tool's result: how the command ended, and its output."""
    if result.stopped_because is not None:
        head = f"Stopped after {result.seconds:.1f} s: {result.stopped_because}."
    elif result.timed_out:
        head = f"Stopped after {timeout:g} s (its timeout); it had not finished."
    else:
        head = f"Exit code {result.exit_code} ({result.seconds:.1f} s)."
    if capped:
        head += f" The timeout asked for was above the most allowed; {timeout:g} s was used."
    return head + "\n" + _streams(result.stdout.text(), result.stderr.text())


def _streams(stdout: str, stderr: str) -> str:
    parts = []
    if stdout:
        parts.append(f"stdout:\n{stdout.rstrip(chr(10))}")
    if stderr:
        parts.append(f"stderr:\n{stderr.rstrip(chr(10))}")
    return "\n".join(parts) or "(no output)"


def _job_output(job: Job) -> str:
    return _streams(job.stdout.text(), job.stderr.text())
