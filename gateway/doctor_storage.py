"""``herald doctor``'s look at the database the configuration names, changing nothing.

- SQLite (``state.db``): SQLite's own integrity check, and whether the file can be written.
- PostgreSQL: whether it answers, its version (13 or newer), whether its schema is this Herald's (or
  one Herald will migrate at start, or one a newer Herald wrote), and whether the configured user may
  create tables (migrations) and read and write Herald's tables. Nothing is migrated or created.

The URL is only ever shown without its password.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from agent.private import on_read_only_file_system
from agent.storage.errors import StorageUnavailable
from agent.storage.migrate import head_revision, known_revision
from agent.storage.sqlite import Integrity, check_integrity
from agent.storage.urls import StorageUrl
from gateway.config import ConfigError
from gateway.doctor import DoctorContext, Finding
from gateway.home import load_env
from gateway.storage import storage_url

MIN_POSTGRESQL = 13  # generated columns (12) and DROP DATABASE ... WITH (FORCE) (13)


async def check_storage(ctx: DoctorContext) -> list[Finding]:
    if ctx.config is None:
        return [Finding("skip", "database", "not checked: config.yaml is invalid (see above).")]
    try:
        load_env(ctx.home, ctx.environ)  # storage.url may name a variable kept in .env
        url = storage_url(ctx.config, ctx.home, ctx.environ)
    except (ConfigError, OSError) as error:
        return [Finding("fail", "database", str(error))]
    if url.dialect == "sqlite":
        assert url.path is not None
        return [await asyncio.to_thread(inspect_sqlite, url.path)]
    return await inspect_postgresql(url, ctx.timeout)


def inspect_sqlite(path: Path) -> Finding:
    """SQLite's own integrity check of ``path`` (blocking: run it in a thread)."""
    fresh = f"to start fresh: cp {path} {path}.bak && rm {path} {path}-wal {path}-shm"
    if not path.exists():
        return Finding("ok", "database", f"{path} does not exist yet; the first chat creates it.")
    report = check_integrity(path)
    if report.state is Integrity.DAMAGED:
        return Finding("fail", "database", f"{path} is damaged ({report.detail}); {fresh}.")
    if report.state is Integrity.UNREADABLE:
        return Finding("fail", "database", f"cannot read {path} ({report.detail}); check its permissions.")
    if on_read_only_file_system(path):
        return Finding(
            "warn", "database", f"{path} passed SQLite's integrity check; it is on a read-only file system."
        )
    if not os.access(path, os.W_OK):
        return Finding("fail", "database", f"{path} is read-only; fix: chmod u+w {path}.")
    return Finding("ok", "database", f"{path} passed SQLite's integrity check.")


async def inspect_postgresql(url: StorageUrl, connect_seconds: float) -> list[Finding]:
    from agent.storage.postgres import inspect_server  # asyncpg: only for PostgreSQL

    where = url.redacted
    try:
        facts = await inspect_server(url, connect_timeout=connect_seconds)
    except StorageUnavailable as error:
        return [Finding("fail", "database", f"{error}.")]
    findings = [_version_finding(where, facts.version)]
    if not facts.unreadable:
        findings.append(_schema_finding(where, facts.revision))
    missing = [f"{right} on {table}" for table, right in facts.denied]
    if not facts.may_create:
        missing.insert(0, "CREATE in schema public (migrations create tables)")
    if missing:
        findings.append(
            Finding(
                "fail",
                "database",
                f"the user of {where} lacks {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''}; "
                "fix: make it the owner of the database (ALTER DATABASE … OWNER TO …) or GRANT these.",
            )
        )
    else:
        findings.append(
            Finding("ok", "database", f"the user of {where} may create and change Herald's tables.")
        )
    return findings


def _version_finding(where: str, number: int) -> Finding:
    major = number // 10_000
    text = f"{where} answers: PostgreSQL {major}.{number % 10_000}"
    if major < MIN_POSTGRESQL:
        return Finding("fail", "database", f"{text}; Herald needs PostgreSQL {MIN_POSTGRESQL} or newer.")
    return Finding("ok", "database", f"{text}.")


def _schema_finding(where: str, revision: str | None) -> Finding:
    head = head_revision()
    if revision is None:
        return Finding("ok", "database", f"{where} is empty; Herald creates its tables at the first start.")
    if revision == head:
        return Finding("ok", "database", f"{where} has this Herald's schema (revision {head}).")
    if known_revision(str(revision)):
        return Finding(
            "warn",
            "database",
            f"{where} is at schema revision {revision}; Herald migrates it to {head} at start.",
        )
    return Finding(
        "fail",
        "database",
        f"{where} is at schema revision {revision}, which this Herald does not know: a newer Herald migrated "
        "it. Upgrade Herald.",
    )
