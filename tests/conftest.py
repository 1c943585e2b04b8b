"""Shared fixtures: an emulator on loopback, a throwaway HERALD_HOME, a runtime wired to both."""

from __future__ import annotations

import logging
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from gateway.cli.dispatch import run
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home
from tests.emulator import ProviderEmulator
from tests.fakes.web import FakeWeb
from tests.helpers import Ran
from tests.postgres import PostgresServer
from tests.redis_server import RedisServer
from tests.web_support import Contexts, tool_contexts


@pytest.fixture(autouse=True)
def _restore_log_levels() -> Iterator[None]:
    """In-process `herald` runs configure Herald's loggers; give the next test the levels it had."""
    names = ("agent", "gateway", "adapters")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test (``item.report_call``...), for fixtures that act on a
    failure in their teardown (a browser test's screenshot)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def emulator() -> ProviderEmulator:
    return ProviderEmulator()


@pytest.fixture
async def emulator_url(emulator: ProviderEmulator) -> AsyncIterator[str]:
    async with emulator.serve() as url:
        yield url


@pytest.fixture
def served(emulator: ProviderEmulator) -> Iterator[str]:
    """The emulator in a thread of its own: for in-process CLI runs (which start their own loop)."""
    with emulator.serve_in_thread() as url:
        yield url


BACKENDS = ("sqlite", "postgresql")
RUN_ONCE = ("sqlite_itself", "own_database")  # markers of tests not run per --storage database
DATABASE_URL_VARIABLE = "HERALD_TEST_DATABASE_URL"
_postgres: PostgresServer | None = None
_database_url: str | None = None  # the current test's PostgreSQL database (read by make_config)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--storage",
        choices=[*BACKENDS, "both", "each"],
        default="both",
        help="the database(s) the tests that keep state run on: sqlite, postgresql, both (default: the "
        "storage tests on each, every other test on one of the two) or each (every test on each)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sqlite_itself: a test of SQLite itself (its file, WAL, damage, an old release's state.db)"
    )
    config.addinivalue_line(
        "markers",
        "own_database: the test brings its own database (a PostgreSQL of its own, both ends of a move), "
        "so it runs once whatever --storage says",
    )
    config.addinivalue_line(
        "markers",
        "each_database: what it tests is storage (through the gateway or a process boundary), so with "
        "--storage both it runs on each database, as a test of the storage seam does",
    )
    config.addinivalue_line(
        "markers",
        "slow: seconds of its own (processes started, leases waited out, load made); the default run "
        "runs it, `-m 'not slow'` leaves it out",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that keeps state (it uses ``home`` or ``storage``) is made for each chosen database;
    :func:`pytest_collection_modifyitems` keeps one of the two where that is enough."""
    if "backend" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("--storage")
    backends = list(BACKENDS) if chosen in ("both", "each") else [chosen]
    if any(metafunc.definition.get_closest_marker(name) for name in RUN_ONCE):
        backends = ["sqlite"]  # the home's state.db; an own_database test opens its own besides
    metafunc.parametrize("backend", backends)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--storage both``, a test of storage runs on each database and any other test on one.

    A test of storage uses the ``storage`` fixture (the repository seam) or is marked ``each_database``
    (storage seen through the gateway: a crash and restart, turns interrupted, many sessions at once).
    Any other test keeps state only on the way to what it tests, so it runs once, on the database
    :func:`database_for` picks from its name: half the tests on each, the same ones every run.
    ``--storage each`` runs every test on each (the full run for a change to storage itself)."""
    if config.getoption("--storage") != "both":
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec is not None else None
        if (
            backend is None
            or "storage" in getattr(item, "fixturenames", ())
            or item.get_closest_marker("each_database")
            or any(item.get_closest_marker(name) for name in RUN_ONCE)
            or database_for(item.nodeid, backend) == backend
        ):
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def database_for(nodeid: str, backend: str) -> str:
    """The one database a test that is not about storage runs on: from a checksum of its id without the
    database (stable across runs and machines, unlike ``hash``)."""
    test, _, params = nodeid.partition("[")
    rest = "-".join(part for part in params.rstrip("]").split("-") if part != backend)
    return BACKENDS[zlib.crc32(f"{test}[{rest}]".encode()) % len(BACKENDS)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _postgres is not None:
        _postgres.stop()


def postgres_server() -> PostgresServer:
    """The session's PostgreSQL, started on first use."""
    global _postgres
    if _postgres is None:
        _postgres = PostgresServer()
        _postgres.start()
        _postgres.make_ahead(2)
    return _postgres


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A Redis of this test's own (a cluster's coordination; it holds nothing that matters)."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, which it may halt and resume (the shared one serves the
    other tests)."""
    own = PostgresServer()
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def postgresql_database() -> Iterator[str]:
    """A fresh PostgreSQL database at Herald's schema, whatever ``--storage`` says (for tests of moving
    between the two)."""
    server = postgres_server()
    url = server.new_database()
    try:
        yield url
    finally:
        server.drop(url)


@pytest.fixture
def database_url(backend: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str | None]:
    """A fresh PostgreSQL database for this test (None on SQLite), also in $HERALD_TEST_DATABASE_URL
    for what runs in another process."""
    global _database_url
    if backend == "sqlite":
        yield None
        return
    server = postgres_server()
    url = server.new_database()
    monkeypatch.setenv(DATABASE_URL_VARIABLE, url)
    _database_url = url
    try:
        yield url
    finally:
        _database_url = None
        server.drop(url)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str | None) -> Iterator[HeraldHome]:
    """A fresh home, API keys for the SDKs, and an empty working directory (no project context).

    On PostgreSQL its config.yaml points storage.url at this test's database."""
    herald_home = HeraldHome(tmp_path / "home")
    ensure_home(herald_home)
    if database_url is not None:
        herald_home.config_path.write_text(f"storage:\n  url: ${DATABASE_URL_VARIABLE}\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HERALD_HOME", str(herald_home.root))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for variable in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    yield herald_home


@pytest.fixture
def herald(capsys: pytest.CaptureFixture[str], home: HeraldHome) -> Callable[..., Ran]:
    """``herald ARGS`` in this process (``gateway.cli.dispatch.run``: the same parsing, home, runtime and exit
    codes as the binary), with its exit code and what it printed."""

    def invoke(*args: str) -> Ran:
        capsys.readouterr()
        code = run(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return invoke


def make_config(base_url: str, provider: str = "anthropic", **sections: dict[str, Any]) -> HeraldConfig:
    """A config pointed at the emulator with fast retries; ``sections`` override config sections.

    Project context files are looked up in the working directory (the test's own, see ``home``), as
    ``herald chat`` does.
    """
    model: dict[str, Any] = {
        "provider": provider,
        "name": "claude-sonnet-4-6" if provider == "anthropic" else "gpt-5",
        "base_url": base_url if provider == "anthropic" else base_url + "/v1",
        "retry_base_delay": 0.01,
        "max_retries": 3,
    }
    model.update(sections.pop("model", {}))
    agent = {"context_dir": str(Path.cwd()), **sections.pop("agent", {})}
    if _database_url is not None and "url" not in sections.get("storage", {}):
        sections["storage"] = {"url": f"${DATABASE_URL_VARIABLE}", **sections.get("storage", {})}
    return HeraldConfig.model_validate({"model": model, "agent": agent, **sections})


@pytest.fixture
async def fake_web() -> AsyncIterator[FakeWeb]:
    """The fake web (pages, feeds, search APIs) on 127.0.0.1."""
    fake = FakeWeb()
    async with fake.serve():
        yield fake


@pytest.fixture
async def contexts(tmp_path: Path) -> AsyncIterator[Contexts]:
    """ToolContext for the owner (``contexts(True)``) or a guest (``contexts(False)``)."""
    async with tool_contexts(tmp_path) as context:
        yield context


@pytest.fixture
async def storage(tmp_path: Path, database_url: str | None) -> AsyncIterator[Storage]:
    """An empty database at this Herald's schema, for repository tests (``Storage`` seam)."""
    async with open_storage(parse_storage_url(database_url, tmp_path / "state.db")) as opened:
        yield opened
