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
                    batch=args.batch,
                    batch_deadline=args.batch_deadline,
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
