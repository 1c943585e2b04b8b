"""``herald storage migrate --to postgresql://…``: move a bot's whole state from SQLite to PostgreSQL;
``herald storage prune [--dry-run]``: delete at once what ``storage.retention`` keeps no longer
(:mod:`gateway.retention.pruner`).

Everything in ``state.db`` (sessions with their exact prompt bytes, messages with their stored wire
payloads and files, usage, inbox, outbox, jobs, pairings, chat settings: every table of the schema) and
the home's memory and skills files (which PostgreSQL keeps in tables) are copied into the database the
URL names (migrated to this Herald's schema first), then verified: the same rows with the same values
in every column of every table, the same memory and skills, the same hash over every session's prompt
bytes. A second run copies nothing and changes nothing, so a copy cut short is finished by running it
again.

It refuses to start while another process uses ``state.db`` (a gateway, a terminal chat), and no
process can start using it until the copy is over (:mod:`agent.db.in_use`): what a gateway wrote
after a copy would be left behind, and a reply it sent from ``state.db`` after the copy took it as
pending would be sent again from PostgreSQL. A row changed in ``state.db`` after it was copied (the
gateway ran again between two runs) is never overwritten, so it is reported as different.
"""

from __future__ import annotations

import argparse
import asyncio

from agent.db import REPLAYED, BadStorageUrl, TableCopy, copy_tables, open_storage, parse_storage_url, verify
from gateway.config import ConfigError
from gateway.failures import EXIT_FAILED, EXIT_OK
from gateway.home import HeraldHome, from_environment
from gateway.home.database import home_config, open_home_storage
from gateway.home.transfer import FilesCopy, compare, copy_memory, copy_skills


def run_storage_command(home: HeraldHome, args: argparse.Namespace) -> int:
    if args.storage_command == "prune":
        return asyncio.run(_prune(home, dry_run=args.dry_run))
    return asyncio.run(_migrate(home, args.to))


async def _prune(home: HeraldHome, *, dry_run: bool) -> int:
    """``herald storage prune``: every retention step at once (``--dry-run``: counted, nothing changed)."""
    from gateway.retention.pruner import Pruner

    config = home_config(home)
    async with open_home_storage(home, config, pool_size=2, read_only=dry_run) as storage:
        done = await Pruner(storage, config.storage.retention).prune(dry_run=dry_run)
    verb = "Would delete" if dry_run else "Deleted"
    print(f"{verb} (storage.retention in config.yaml):")
    for step, rows in done:
        print(f"  {rows:,} {step.what} older than {step.days:g} days")
    if dry_run:
        print("Nothing was changed (--dry-run).")
    return EXIT_OK


async def _migrate(home: HeraldHome, target: str) -> int:
    config = home_config(home)
    if config.storage.url is not None:
        raise ConfigError(
            "storage.url is already set in config.yaml: `herald storage migrate` copies state.db (SQLite) "
            "into PostgreSQL; set storage.url back to null to copy from state.db"
        )
    if not home.db_path.exists():
        raise ConfigError(f"there is nothing to copy: {home.db_path} does not exist")
    try:
        destination_url = parse_storage_url(from_environment(target, "--to", home), home.db_path)
    except BadStorageUrl as error:
        raise ConfigError(str(error)) from None
    if destination_url.dialect != "postgresql":
        raise ConfigError("--to must be a PostgreSQL URL: postgresql://USER@HOST:PORT/DATABASE")
    source_url = parse_storage_url(None, home.db_path)
    files = FilesCopy()
    async with (
        open_storage(source_url, exclusive=True) as source,  # refused while a gateway uses state.db
        open_storage(destination_url) as destination,
    ):
        print(f"Copying {source_url.redacted} into {destination_url.redacted}")
        steps = await copy_tables(source, destination, progress=_report)
        await copy_memory(home.memories_dir, destination, files)
        await copy_skills(home.skills_dir, destination, files)
        print(f"  memory: {files.memory_documents:,} documents, {files.memory_copied:,} copied")
        print(f"  skills: {files.skills:,} skills, {files.skills_copied:,} copied")
        for line in files.skipped:
            print(f"  skipped skill {line}")
        check = await verify(source, destination)
        differences = await compare(home.memories_dir, home.skills_dir, destination)
    total = sum(step.source_rows for step in steps)
    copied = sum(step.copied for step in steps)
    made_valid = sum(step.made_valid for step in steps)
    if not check.ok or differences:
        for line in [*check.mismatched, *differences]:
            print(f"  different: {line}")
        print(
            "Not verified: the destination differs from state.db (above), and rows it has are never "
            "overwritten. Is it another bot's database, or did the gateway run on state.db after an "
            "earlier copy? Copy into an empty database."
        )
        return EXIT_FAILED
    print(
        f"Verified: every table has the same rows with the same values in every column ({total:,} rows in "
        f"all, {copied:,} copied now), and memory and skills are the same."
    )
    print("Verified: what the sessions send again is identical (hashed in key order on both sides):")
    for part in REPLAYED:
        digest = check.source[part.table]
        print(f"  {part.table} ({digest.rows:,}): {part.what}, sha256 {digest.replayed[:12]}")
    if made_valid:
        they = "they were" if made_valid > 1 else "it was"
        print(
            f"  {_values(made_valid)} in state.db held NUL characters, which PostgreSQL cannot store: {they} "
            "copied without them, as Herald stores all new text, and the hashes compare that cleaned text."
        )
    print(
        "Next: set storage.url in config.yaml (keep the password in .env: storage.url: $HERALD_DATABASE_URL) "
        "and start Herald again."
    )
    return EXIT_OK


def _report(step: TableCopy) -> None:
    cleaned = f", {_values(step.made_valid)} made valid (NUL characters dropped)" if step.made_valid else ""
    print(f"  {step.table}: {step.source_rows:,} rows, {step.copied:,} copied{cleaned}")


def _values(count: int) -> str:
    return f"{count:,} text value{'s' if count != 1 else ''}"
