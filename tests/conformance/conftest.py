"""The ``driver`` fixture: every scenario of the suite once per platform."""

from __future__ import annotations

import pytest

from tests.conformance.driver import Driver
from tests.conformance.drivers import DRIVERS


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> Driver:
    """A fresh driver (and fake) of one platform."""
    return DRIVERS[request.param]()
