"""A running gateway on one platform's fake, built the way ``herald gateway run`` builds it: the
platform's section in the config, its token in the environment, its spec (``adapters.registry``) doing
the rest. In this process (:func:`running`) or, for a crash, in another (:func:`gateway_process`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gateway import tables
from gateway.app import Gateway, open_gateway
from gateway.config import set_value
from gateway.home import HeraldHome
from tests.conformance.driver import Driver
from tests.conftest import make_config
from tests.emulator import ProviderEmulator

SETTLE_TIMEOUT = 30.0
QUIET_POLLS = 5  # polls 50 ms apart with nothing pending and no new inbox row: settled
STREAM_INTERVAL = 0.05


@dataclass
class Running:
    """The gateway, the platform's driver and the provider emulator of one scenario."""

    gateway: Gateway
    driver: Driver
    emulator: ProviderEmulator

    @property
    def name(self) -> str:
        return self.driver.spec.name

    async def settled(self, timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: ASYNC109 - a bounded wait
        """Nothing left to deliver, store, answer or send, and no new message for a while."""
        services = self.gateway.services
        deadline = time.monotonic() + timeout
        quiet, rows = 0, -1
        while time.monotonic() < deadline:
            count = await services.runtime.storage.read(_inbox_rows)
            idle = (
                self.driver.quiet()
                and services.lanes.depth == 0
                and not await services.inbox.pending()
                and await services.outbox.pending_count() == 0
            )
            quiet = quiet + 1 if idle and count == rows else 0
            rows = count
            if quiet >= QUIET_POLLS:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the gateway on {self.name} did not settle in {timeout}s")

    async def counted(self, metric: str, timeout: float = SETTLE_TIMEOUT, **labels: str) -> float:  # noqa: ASYNC109
        """The value of ``metric`` (a Prometheus sample of the gateway's) once it is at least 1."""
        registry = self.gateway.services.metrics.registry
        deadline = time.monotonic() + timeout
        while (value := registry.get_sample_value(metric, labels) or 0.0) < 1:
            if time.monotonic() >= deadline:
                raise AssertionError(f"{metric}{labels} stayed at 0 for {timeout}s")
            await asyncio.sleep(0.02)
        return value

    async def session_keys(self) -> list[str]:
        return sorted(s.session_key for s in await self.gateway.services.runtime.store.list_sessions())


def _inbox_rows(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(tables.inbox)).scalar_one())


def gateway_settings(driver: Driver, **gateway: Any) -> dict[str, Any]:
    return {
        "admins": [f"{driver.spec.name}:{driver.admin}"],
        "http_port": 0,
        "stream_edit_interval": STREAM_INTERVAL,
        **gateway,
    }


@asynccontextmanager
async def running(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, **gateway: Any
) -> AsyncIterator[Running]:
    """The platform's fake and a gateway on it; ``gateway``: settings of the gateway section."""
    async with driver.serving() as section:
        config = make_config(
            emulator_url, gateway=gateway_settings(driver, **gateway), **{driver.spec.name: section}
        )
        async with open_gateway(config, home, environ=driver.environ()) as opened:
            yield Running(opened, driver, emulator)


def configure(home: HeraldHome, provider_url: str, driver: Driver, section: dict[str, Any]) -> None:
    """``config.yaml`` for a gateway in another process, as ``herald config set`` writes it."""
    values: dict[str, Any] = {
        "model.base_url": provider_url,
        "model.retry_base_delay": 0.01,
        **{f"gateway.{key}": value for key, value in gateway_settings(driver).items()},
        **{f"{driver.spec.name}.{key}": value for key, value in section.items()},
    }
    for key, value in values.items():
        set_value(home.config_path, key, value if isinstance(value, str) else json.dumps(value))


@contextmanager
def gateway_process(home: HeraldHome, driver: Driver) -> Iterator[subprocess.Popen[str]]:
    """``herald gateway run`` in a process of its own (killed at the end if still running)."""
    environ = {**os.environ, "HERALD_HOME": str(home.root), **driver.environ()}
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "gateway", "run"],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
