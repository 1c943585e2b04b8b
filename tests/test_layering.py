"""Imports point one way: the agent knows no platform, an adapter knows no agent or gateway."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved to their package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                found.add(node.module)
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offending(package: str, forbidden: tuple[str, ...]) -> dict[str, set[str]]:
    bad: dict[str, set[str]] = {}
    for path in modules(package):
        hits = {name for name in imports(path) if name.split(".")[0] in forbidden}
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    return bad


def test_the_agent_imports_no_gateway_and_no_platform() -> None:
    assert offending("agent", ("gateway", "adapters", "telegram", "discord")) == {}


def test_adapters_import_neither_the_agent_nor_the_gateway() -> None:
    assert offending("adapters", ("agent", "gateway")) == {}


# Interfaces a platform adapter asks its host to implement (the gateway implements them on its store).
ADAPTER_SEAMS = {"adapters.discord.interaction_records"}


def test_only_the_composition_root_constructs_platform_adapters() -> None:
    users = {
        str(path.relative_to(ROOT))
        for path in modules("gateway")
        if any(
            name.startswith(("adapters.telegram", "adapters.discord")) and name not in ADAPTER_SEAMS
            for name in imports(path)
        )
    }
    assert users <= {"gateway/app.py"}


def test_the_gateway_never_imports_a_platform_sdk() -> None:
    assert offending("gateway", ("telegram", "discord")) == {}


def test_side_tasks_do_not_import_the_loop_that_builds_on_them() -> None:
    assert not any(name.startswith("agent.loop") for name in imports(ROOT / "agent" / "side.py"))


# Repositories outside agent/store: each is the one module that knows SQL for its kind of state.
REPOSITORIES = {
    "agent/memory/database.py",
    "agent/skills/database.py",
    "gateway/chat_settings.py",
    "gateway/console/links.py",
    "gateway/console/reports.py",  # the console's read-only aggregates
    "gateway/cron/jobs.py",
    "gateway/discord_interactions.py",
    "gateway/facts.py",
    "gateway/inbox.py",
    "gateway/outbox.py",
    "gateway/pairing.py",
}


def users_of(module: str) -> set[str]:
    return {
        str(path.relative_to(ROOT))
        for package in ("agent", "gateway", "adapters")
        for path in modules(package)
        if any(name.split(".")[0] == module for name in imports(path))
    }


def test_only_repositories_and_the_storage_layer_speak_sql() -> None:
    """SQLAlchemy (a connection, a statement, SQL text) only in the storage layer and the repositories;
    no sqlite3 anywhere but the SQLite storage itself (and the frozen migrations of old releases)."""
    layer = ("agent/storage/", "agent/store/")
    above = {user for user in users_of("sqlalchemy") if not user.startswith(layer)}
    assert above <= REPOSITORIES, above - REPOSITORIES
    allowed = {"agent/storage/sqlite.py", "agent/storage/legacy.py"}
    assert users_of("sqlite3") <= allowed, users_of("sqlite3") - allowed


def test_every_reply_takes_one_road() -> None:
    """Only gateway.replies queues into the outbox; an approval queues its welcome inside its own
    transaction (gateway.pairing), so the welcome is queued before the person can write."""

    def users(call: str) -> set[str]:
        return {
            str(path.relative_to(ROOT))
            for path in modules("gateway")
            if call in path.read_text(encoding="utf-8")
        }

    assert users("outbox.enqueue(") <= {"gateway/replies.py"}, users("outbox.enqueue(")
    assert users("insert_items(") <= {"gateway/outbox.py", "gateway/pairing.py"}, users("insert_items(")


def test_resilience_is_neutral_ground() -> None:
    """Backoff, background loops and lease renewal serve every layer, so they import none of them (and
    no third-party library: nothing to install for an adapter that only needs a backoff)."""
    herald = ("agent", "gateway", "adapters", "tests")
    assert offending("resilience", herald) == {}
    third_party = {
        name for path in modules("resilience") for name in imports(path)
        if name.split(".")[0] not in {"resilience", "__future__", "asyncio", "contextlib", "dataclasses",
                                      "enum", "logging", "random", "types", "typing", "collections"}
    }  # fmt: skip
    assert third_party == set()
