"""``herald gateway run|install`` and ``herald pairing list|approve|revoke``."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.access.auth import Authorizer, access_policy
from gateway.access.pairing import Pairing
from gateway.chats import person_id
from gateway.cli.units import install_user_unit, user_unit_path
from gateway.config import HeraldConfig, validate
from gateway.cron.jobs import CronJobs
from gateway.cron.standing import pause_lost
from gateway.home import HeraldHome
from gateway.home.database import home_config, open_home_storage


def run_gateway_command(home: HeraldHome, args: argparse.Namespace) -> int:
    if args.gateway_command == "install":
        path = install_user_unit(home.root)
        print(f"wrote {path}")
        print("now: systemctl --user daemon-reload && systemctl --user enable --now herald-gateway")
        print("logs: journalctl --user -u herald-gateway -f   (loginctl enable-linger keeps it running)")
        return 0
    from gateway.app import run_gateway  # imports the SDKs: only when the gateway runs

    config = with_run_options(home_config(home), instance=args.instance, http_port=args.http_port)
    return asyncio.run(run_gateway(config, home))


def with_run_options(config: HeraldConfig, *, instance: str | None, http_port: int | None) -> HeraldConfig:
    """``config`` with the command line's per-process settings (several instances share one config
    file: systemd's ``herald-gateway@PORT`` passes ``--instance %H-%i --http-port %i``). Raises
    ``gateway.config.ConfigError`` for a value the setting refuses."""
    changes: dict[str, dict[str, object]] = {}
    if instance is not None:
        changes["cluster"] = {"instance_id": instance}
    if http_port is not None:
        changes["gateway"] = {"http_port": http_port}
    if not changes:
        return config
    data = config.model_dump()
    for section, values in changes.items():
        data[section].update(values)
    return validate(data, "the command line with the config")


@asynccontextmanager
async def _pairing(
    home: HeraldHome, *, read_only: bool
) -> AsyncIterator[tuple[Pairing, CronJobs, Authorizer]]:
    """The pairing tables, the jobs, and who may use the bot by the home's configuration."""
    config = home_config(home)
    async with open_home_storage(home, config, read_only=read_only) as storage:
        pairing = Pairing(storage)
        yield pairing, CronJobs(storage), Authorizer(access_policy(config), pairing)


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


async def _run_pairing(home: HeraldHome, args: argparse.Namespace) -> int:
    async with _pairing(home, read_only=args.pairing_command == "list") as (pairing, jobs, authorizer):
        if args.pairing_command == "list":
            pending, approved = await pairing.pending(), await pairing.approved()
            print("Pending codes:" if pending else "No pending codes.")
            for code in pending:
                who = f"{code.platform}:{code.user_id}  {code.user_name}"
                print(f"  {code.code}  {who}  (until {_when(code.expires_at)})")
            print("Approved:" if approved else "Nobody approved yet.")
            for person in approved:
                who = f"{person.platform}:{person.user_id}  {person.user_name}"
                print(f"  {who}  (since {_when(person.approved_at)})")
            return 0
        if args.pairing_command == "approve":
            user = await pairing.approve(args.platform, args.code, "cli")  # queues the welcome too
            if user is None:
                missing = f"No pending {args.platform} code {args.code.upper()} (codes expire after an hour)."
                print(missing, file=sys.stderr)
                return 1
            print(f"Approved {user.user_name} ({user.platform}:{user.user_id}); they will be told.")
            return 0
        who = person_id(args.platform, args.user_id)
        if not await pairing.revoke(args.platform, args.user_id):
            print(f"{who} was not approved.", file=sys.stderr)
            return 1
        paused = await pause_lost(jobs, authorizer, person=who)
        print(f"Revoked {who}.")
        if paused:
            print(f"Paused {len(paused)} scheduled job(s) they made (they never run for them again unless "
                  "resumed):")  # fmt: skip
            for item in paused:
                print(f'  {item.job.id}  "{item.job.name}"')
        return 0


def run_pairing_command(home: HeraldHome, args: argparse.Namespace) -> int:
    return asyncio.run(_run_pairing(home, args))


__all__ = ["run_gateway_command", "run_pairing_command", "user_unit_path"]
