"""What the gateway benchmark's measurements share: the gateway as `herald gateway run` opens it (or
with Telegram's pacing lifted), waiting for it to settle, a fresh home and database per run, tables."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

from telegram.ext import AIORateLimiter

import adapters.telegram.adapter as telegram_adapter
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.ratelimit import BoundedRateLimiter
from adapters.telegram.spec import SPEC as TELEGRAM
from benchmarks.storage import run_storage
from gateway.app import Gateway, open_gateway
from gateway.config import HeraldConfig
from gateway.home import HeraldHome, ensure_home

SETTLE_TIMEOUT = 600.0
POLL = 0.005


# --- the gateway ----------------------------------------------------------------------------------


class _UnpacedLimiter(BoundedRateLimiter):
    """:class:`BoundedRateLimiter` with AIORateLimiter's overall and per-group rates switched off."""

    def __init__(self, *, max_retries: int, max_wait: float) -> None:
        AIORateLimiter.__init__(self, overall_max_rate=0, group_max_rate=0, max_retries=max_retries)
        self.max_wait = max_wait


class UnpacedTelegramAdapter(TelegramAdapter):
    """The Telegram adapter without python-telegram-bot's flood pacing (30 sends/s per bot, 20 per
    minute per group): what the gateway itself can do, and emulated time between a group's turns that
    real-time limits do not stretch."""

    def _build_bot(self) -> Any:
        with mock.patch.object(telegram_adapter, "BoundedRateLimiter", _UnpacedLimiter):
            return super()._build_bot()


T = TypeVar("T")
STORAGE: list[str | None] = [None]  # --storage: set once by use_storage() before any run
STORAGE_URL: ContextVar[str | None] = ContextVar("STORAGE_URL", default=None)  # this run's database


def process_config(emulator_url: str, base_url: str, users: list[int], *, interval: float) -> HeraldConfig:
    """Defaults, the chats' users on the allowlist, streaming every ``interval`` seconds, the state where
    ``--storage`` says (a fresh database per run: ``fresh_state``)."""
    return HeraldConfig.model_validate(
        {
            "storage": {"url": STORAGE_URL.get()},
            "model": {"base_url": emulator_url},
            "gateway": {"http_port": 0, "stream_edit_interval": interval},
            "telegram": {"base_url": base_url, "allowed_users": [str(user) for user in users]},
        }
    )


@asynccontextmanager
async def running_gateway(
    config: HeraldConfig, home: HeraldHome, token: str, *, paced: bool = True
) -> AsyncIterator[Gateway]:
    """``open_gateway`` exactly as ``herald gateway run`` does it, or with :class:`UnpacedTelegramAdapter`."""
    if paced:
        opened = open_gateway(config, home, environ={"TELEGRAM_BOT_TOKEN": token})
    else:
        adapter = UnpacedTelegramAdapter(token, base_url=config.platform_settings(TELEGRAM).base_url)
        opened = open_gateway(config, home, adapters=lambda _storage: [adapter])
    async with opened as gateway:
        yield gateway


def total(metric: Any, **labels: str) -> int:
    """The sum of a prometheus counter's ``_total`` samples over the labels matching ``labels``."""
    return int(
        sum(
            sample.value
            for family in metric.collect()
            for sample in family.samples
            if sample.name.endswith("_total") and labels.items() <= sample.labels.items()
        )
    )


def operations_sent(gateway: Gateway) -> int:
    """Outbox operations the platform accepted (an answer that fits one message is one operation)."""
    return total(gateway.services.metrics.messages_out)


def turns_finished(gateway: Gateway) -> int:
    return total(gateway.services.metrics.turns)


def busy_pool_slots(gateway: Gateway) -> int | None:
    """Requests python-telegram-bot's HTTP connection pool counts as active. Read while the gateway is
    idle, each one is a leaked slot. A diagnostic: it reaches into PTB's, httpx's and httpcore's
    private attributes (None if they moved)."""
    adapter: Any = gateway.adapters[0]
    try:
        return len(adapter._bot._request[1]._client._transport._pool._requests)
    except (AttributeError, IndexError, TypeError):
        return None


async def poll(predicate: Callable[[], bool], interval: float = POLL) -> None:
    while True:
        if predicate():
            return
        await asyncio.sleep(interval)


async def settle(gateway: Gateway, turns: int, timeout: float = SETTLE_TIMEOUT) -> None:  # noqa: ASYNC109
    """Wait until ``turns`` turns finished and every reply was sent."""
    services = gateway.services
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (
            turns_finished(gateway) >= turns
            and services.lanes.depth == 0
            and await services.outbox.pending_count() == 0
        ):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the gateway did not answer {turns} messages in {timeout:.0f}s")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in 0..100."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered), math.ceil(q / 100 * len(ordered))) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fresh_home(tmp: str) -> HeraldHome:
    home = HeraldHome(Path(tmp) / "home")
    ensure_home(home)
    return home


def use_storage(base: str | None) -> None:
    """Where the runs keep their state (``--storage``)."""
    STORAGE[0] = base


@asynccontextmanager
async def fresh_state() -> AsyncIterator[None]:
    """A fresh database for one run where ``--storage`` points (nothing to do for SQLite: each run has a
    home of its own); ``process_config`` picks it up."""
    async with run_storage(STORAGE[0]) as section:
        token = STORAGE_URL.set(section.get("url"))
        try:
            yield
        finally:
            STORAGE_URL.reset(token)
