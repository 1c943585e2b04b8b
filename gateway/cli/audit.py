"""``herald audit``: what the owner's tools ran and who approved it, newest first (``tool_audit``).

It reads the database (every process's rows) and changes nothing. Filters: ``--chat`` (a session key,
as ``herald insights`` shows it), ``--tool``, ``--outcome`` (repeatable), ``--since`` (hours), ``--limit``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import datetime

from agent.api import AuditEntry, AuditLog, AuditOutcome
from gateway.failures import EXIT_UNUSABLE, CommandFailed
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage

ACTION_WIDTH = 100  # characters of a command shown on its line (the database keeps it whole)


def render(entries: list[AuditEntry]) -> str:
    """One line per row, then its detail indented; oldest of the page first, as a log reads."""
    if not entries:
        return "Nothing in the audit matches."
    lines = []
    for entry in reversed(entries):
        when = datetime.fromtimestamp(entry.created_at).strftime("%Y-%m-%d %H:%M:%S")
        action = " ".join(entry.action.split())
        if len(action) > ACTION_WIDTH:
            action = action[: ACTION_WIDTH - 1] + "…"
        exit_code = f" exit {entry.exit_code}" if entry.exit_code is not None else ""
        who = f" for {entry.person}" if entry.person else ""
        if entry.decided_by:
            who = f" by {entry.decided_by}"
        code = f" [{entry.code}]" if entry.code else ""
        outcome = f"{entry.outcome.value}{exit_code}{who}{code}"
        lines.append(f"{when} {entry.session_key} {entry.tool} {outcome}: {action}")
        if entry.detail:
            lines.append(f"    {entry.detail}")
    return "\n".join(lines)


async def _run(home: HeraldHome, args: argparse.Namespace) -> int:
    since = None if args.since is None else time.time() - args.since * 3600
    known = {outcome.value: outcome for outcome in AuditOutcome}
    unknown = [value for value in args.outcome or () if value not in known]
    if unknown:
        raise CommandFailed(
            f"--outcome {unknown[0]} is not an outcome; one of: {', '.join(known)}", EXIT_UNUSABLE
        )
    outcomes = tuple(known[value] for value in args.outcome or ())
    async with open_home_storage(home, pool_size=2, read_only=True) as storage:
        entries = await AuditLog(storage).entries(
            session_key=args.chat, tool=args.tool, outcomes=outcomes, since=since, limit=args.limit
        )
    print(render(entries))
    return 0


def run_audit_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_run(home, args))
