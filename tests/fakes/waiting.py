"""Waiting for a state, never for a while: the one home of the suite's waits.

A test that needs something to have happened waits until it can see it, then checks; it never sleeps
a fixed time and hopes (on a loaded machine "a while" is sometimes not long enough). A "nothing else
happened" check waits first for a later event that could only come after it (a marker message
answered, a call recorded after it), so everything before it has been processed.

:func:`wait_until`, :func:`wait_until_sync` and :func:`wait_until_awaited` poll any predicate; the
fake Telegram and the fake Discord wait through a :class:`Waiter` under their own lock and describe
what they saw when a wait times out.
A predicate raising LookupError or AssertionError counts as "not yet"; a timeout raises
:class:`WaitTimeout`, whose message says what the predicate last did.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
WAIT_INTERVAL = 0.01
# Seconds a wait may take before the test fails. Generous: a wait ends as soon as its state is there,
# so only a failing test pays for it, and a 2-core machine running several suites at once is slow.
WAIT_TIMEOUT = 30.0
# The same for a wait that includes starting a Python process: Herald's imports alone take seconds of CPU.
PROCESS_TIMEOUT = 180.0


class WaitTimeout(AssertionError, TimeoutError):
    """A wait gave up; the message says what the predicate last did and what the fake saw."""


class Waiter:
    """Polls predicates (under ``lock``, if given); ``describe`` reports recent activity on timeout.

    :meth:`wait_for_awaited` polls a predicate that returns an awaitable (a database read, say)."""

    def __init__(
        self,
        lock: threading.RLock | threading.Lock | None = None,
        describe: Callable[[], str] = lambda: "",
    ) -> None:
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

    async def wait_for_awaited(
        self,
        predicate: Callable[[], Awaitable[T]],
        timeout: float,  # noqa: ASYNC109 - a bounded wait is the point of this helper
        what: str | None,
    ) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value: T | None = None
            error: BaseException | None = None
            try:
                value = await predicate()
            except (LookupError, AssertionError) as exc:
                error = exc
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
            with self.lock if self.lock is not None else contextlib.nullcontext():
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
        described = self.describe()
        message = f"timed out after {timeout}s waiting for {label}; it last {last}"
        return WaitTimeout(f"{message}\n{described}" if described else message)


async def wait_until(
    predicate: Callable[[], T],
    timeout: float = WAIT_TIMEOUT,  # noqa: ASYNC109 - a bounded wait is the point of this helper
    *,
    what: str | None = None,
    describe: Callable[[], str] = lambda: "",
) -> T:
    """Poll ``predicate`` until it returns something truthy; return that."""
    return await Waiter(describe=describe).wait_for(predicate, timeout, what)


async def wait_until_awaited(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = WAIT_TIMEOUT,  # noqa: ASYNC109 - a bounded wait is the point of this helper
    *,
    what: str | None = None,
    describe: Callable[[], str] = lambda: "",
) -> T:
    """:func:`wait_until` for a predicate that must be awaited (a read from the database)."""
    return await Waiter(describe=describe).wait_for_awaited(predicate, timeout, what)


def wait_until_sync(
    predicate: Callable[[], T],
    timeout: float = WAIT_TIMEOUT,
    *,
    what: str | None = None,
    describe: Callable[[], str] = lambda: "",
) -> T:
    """:func:`wait_until` for synchronous tests (a subprocess, a server in a thread)."""
    return Waiter(describe=describe).wait_for_sync(predicate, timeout, what)
