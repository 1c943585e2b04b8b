"""A running gateway on one platform's fake, built the way ``herald gateway run`` builds it: the
platform's section in the config, its token in the environment, its spec (``adapters.registry``) doing
the rest. In this process (:func:`running`) or, for a crash, in another (:func:`gateway_process`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from gateway.app import Gateway, open_gateway
from gateway.config import set_value
from gateway.home import HeraldHome
from tests.conformance.driver import Driver
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until, wait_until_awaited

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

    async def settled(self, timeout: float = WAIT_TIMEOUT) -> None:  # noqa: ASYNC109 - a bounded wait
        """Wait until everything people wrote so far was handed over, stored, answered and the answers
        sent (checked in the order work flows, so nothing slips between two checks)."""
        await self.driver.delivered(self.gateway.services.adapters[self.name])
        await wait_until_awaited(lambda: idle(self.gateway), timeout, what=f"the gateway on {self.name} idle")

    async def counted(self, metric: str, labels: Mapping[str, str]) -> float:
        """The value of ``metric`` (a Prometheus sample of the gateway's) once it is at least 1."""
        registry = self.gateway.services.metrics.registry
        return await wait_until(
            lambda: registry.get_sample_value(metric, dict(labels)) or 0.0,
            what=f"{metric}{dict(labels)} >= 1",
        )

    async def session_keys(self) -> list[str]:
        return sorted(s.session_key for s in await self.gateway.services.runtime.store.sessions.recent())


async def idle(gateway: Gateway) -> bool:
    """Everything handed to the gateway so far was stored, answered and the answers sent."""
    services = gateway.services
    return (
        not await services.inbox.pending()
        and services.lanes.depth == 0
        and await services.outbox.pending_count() == 0
    )


def user_texts(request: Any) -> list[str]:
    """The text of each user message of a model request."""
    return [
        block["text"]
        for message in request.json["messages"]
        if message["role"] == "user"
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "text"
    ]


def gateway_settings(driver: Driver, **gateway: Any) -> dict[str, Any]:
    return {
        "admins": [f"{driver.spec.name}:{driver.admin}"],
        "http_port": 0,
        "stream_edit_interval": STREAM_INTERVAL,
        **driver.gateway_section(),
        **gateway,
    }


@asynccontextmanager
async def running(
    driver: Driver, home: HeraldHome, emulator: ProviderEmulator, emulator_url: str, **gateway: Any
) -> AsyncIterator[Running]:
    """The platform's fake and a gateway on it; ``gateway``: settings of the gateway section."""
    async with driver.serving() as section:
        sections = {"gateway": gateway_settings(driver, **gateway), driver.spec.name: section}
        config = make_config(emulator_url, "anthropic", **sections)
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
