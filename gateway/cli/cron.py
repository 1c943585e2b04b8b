"""``herald cron add|list|pause|resume|run|remove``: manage scheduled jobs from the command line.

It only changes the job table; a running ``herald gateway run`` picks the change up within
``scheduler.poll_interval`` seconds (``run`` marks a job due now, so the gateway runs it then). The
command line acts as the owner, and has no chat of its own: ``add`` needs ``--target``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway.cron.describe import created, describe_all
from gateway.cron.jobs import CronJobs
from gateway.cron.manage import COMMAND_LINE, CronError, CronManager, JobLimits, change_job
from gateway.home import HeraldHome
from gateway.home.database import home_config, open_home_storage
from gateway.timezones import resolve_timezone


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``herald cron ...``; ``common`` carries the options every command takes (``-v``)."""
    cron = commands.add_parser(
        "cron", parents=[common], help="scheduled jobs: add, list, pause, resume, run, remove"
    )
    cron_commands = cron.add_subparsers(dest="cron_command", required=True)
    add = cron_commands.add_parser(
        "add", parents=[common], help="schedule a prompt whose answer is posted to a chat"
    )
    add.add_argument("--target", required=True, help="chat to post into: platform:chat_id[:thread_id]")
    add.add_argument(
        "--schedule", required=True, help="'0 8 * * 1-5' (cron), 'every 2h', 'in 30m' or an ISO time"
    )
    add.add_argument("--name", help="a short name (default: from the prompt)")
    add.add_argument("--repeat", type=int, help="number of runs, then the job stops (default: until removed)")
    add.add_argument("prompt", help="what each run should do")
    cron_commands.add_parser(
        "list", parents=[common], help="every job: schedule, next run, last run and its delivery"
    )
    for verb, text in (
        ("pause", "stop running a job until it is resumed"),
        ("resume", "run a paused job again from its next time"),
        ("run", "run a job now (the running gateway starts it within seconds)"),
        ("remove", "delete a job"),
    ):
        cron_commands.add_parser(verb, parents=[common], help=text).add_argument("job_id")


async def _run(home: HeraldHome, args: argparse.Namespace) -> int:
    config = home_config(home)
    async with open_home_storage(home, read_only=args.cron_command == "list") as storage:
        manager = CronManager(
            CronJobs(storage), resolve_timezone(config.scheduler.timezone), JobLimits.of(config.scheduler)
        )
        tz = manager.timezone
        try:
            if args.cron_command == "add":
                job = await manager.create(
                    COMMAND_LINE,
                    prompt=args.prompt,
                    schedule=args.schedule,
                    name=args.name,
                    target=args.target,
                    repeat=args.repeat,
                )
                print(created(job, tz))
            elif args.cron_command == "list":
                print(describe_all(await manager.visible(COMMAND_LINE), tz, empty="No scheduled jobs."))
            else:
                print(await change_job(manager, COMMAND_LINE, args.cron_command, args.job_id))
        except CronError as error:
            print(f"herald cron: {error}", file=sys.stderr)
            return 1
    return 0


def run_cron_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_run(home, args))
