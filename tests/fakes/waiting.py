"""Waiting for a fake platform to reach a state: polling a predicate under the fake's lock.

Shared by the fake Telegram and the fake Discord. A predicate raising LookupError or AssertionError
counts as "not yet"; a timeout raises :class:`WaitTimeout`, whose message says what the fake saw.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
WAIT_INTERVAL = 0.01


class WaitTimeout(AssertionError, TimeoutError):
    """A wait gave up; the message says what the predicate last did and what the fake saw."""


class Waiter:
    """Polls predicates under ``lock``; ``describe`` reports the fake's recent activity on timeout."""

    def __init__(self, lock: threading.RLock | threading.Lock, describe: Callable[[], str]) -> None:
        self.lock = lock
        self.describe = describe

    async def wait_for(self, predicate: Callable[[], T], timeout: float, what: str | None) -> T:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while True:
            value, error = self._try(predicate)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise self._timeout(predicate, timeout, what, value, error)
            await asyncio.sleep(WAIT_INTERVAL)

    def wait_for_sync(self, predicate: Callable[[], T], timeout: float, what: str | None) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value, error = self._try(predicate)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise self._timeout(predicate, timeout, what, value, error)
            time.sleep(WAIT_INTERVAL)

    def _try(self, predicate: Callable[[], T]) -> tuple[T | None, BaseException | None]:
        try:
            with self.lock:
                return predicate(), None
        except (LookupError, AssertionError) as exc:
            return None, exc

    def _timeout(
        self,
        predicate: Callable[..., Any],
        timeout: float,
        what: str | None,
        value: Any,
        error: BaseException | None,
    ) -> WaitTimeout:
        label = what or getattr(predicate, "__qualname__", repr(predicate))
        last = f"raised {error!r}" if error is not None else f"returned {value!r}"
        return WaitTimeout(
            f"timed out after {timeout}s waiting for {label}; it last {last}\n{self.describe()}"
        )
