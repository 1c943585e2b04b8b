"""The ``driver`` fixture: every scenario of the suite once per platform."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.driver import Driver
from tests.conformance.drivers import DRIVERS


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> Driver:
    """A fresh driver (and fake) of one platform."""
    return DRIVERS[request.param]()


# Which database each platform's scenarios run on when both are chosen: the adapter contract does not
# depend on the database (every storage path has tests of its own on both), so each scenario runs on
# every platform once, and on each database for two of them, instead of eight times.
DATABASE_OF = {"discord": "sqlite", "matrix": "postgresql", "slack": "sqlite", "telegram": "postgresql"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--storage both``, keep each platform's scenarios on its database of :data:`DATABASE_OF`."""
    if config.getoption("--storage") != "both":
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    here = Path(__file__).parent
    for item in items:
        params = getattr(item, "callspec", None) if here in item.path.parents else None
        platform = params.params.get("driver") if params is not None else None
        backend = params.params.get("backend") if params is not None else None
        if platform is None or backend is None or DATABASE_OF.get(platform, backend) == backend:
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
