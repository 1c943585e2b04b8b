"""How an adapter tries its link to the platform again while it fails, in one place.

An event stream (Signal), a long poll (Telegram's ``getUpdates``, Matrix's sync) or a mailbox
connection (IMAP) fails now and then: the network, a server restarting, a bad answer. The adapter's
loop (a :class:`~resilience.loops.BackgroundLoop`) then waits the one
:class:`~resilience.backoff.Backoff`'s pause and connects or polls again, for as long as it runs; what
the operator sees is the same on every platform: the first failure of a streak as a warning (and a
failure of another kind within it: a Telegram conflict after a network error), the next ones at
debug, the recovery once, with the count; the adapter's status (``/readyz``, the console) says the
link is down, and why, until it is back. Storing what arrived is the other retry
(:class:`~adapters.base.SinkRetry`). Slack's socket and Discord's gateway are reconnected by their
SDKs (the adapters only report it); WhatsApp is called by webhooks: they keep no link of their own.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from adapters.base import AdapterStatus
from resilience.backoff import Backoff, Streak


class Reconnect:
    """The failures in a row of one link (``what``: "Matrix sync"), its pauses, log lines and status.

    ``status`` is the link's own (the adapter's ``status()`` reads it); ``sleep`` and ``rng`` are for
    tests (a fake clock, fixed jitter)."""

    def __init__(
        self,
        backoff: Backoff,
        what: str,
        *,
        log: logging.Logger,
        status: AdapterStatus,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.streak = Streak(backoff, rng or random.Random())
        self.what = what
        self.status = status
        self._log = log
        self._sleep = sleep
        self._kind: tuple[int, str] | None = None  # the kind of failure logged last in this streak

    async def failed(
        self,
        problem: str,
        *,
        retry_after: float | None = None,
        longest: bool = False,
        level: int = logging.WARNING,
        advice: str = "",
    ) -> None:
        """Count a failure (``problem``, in words), show it, and wait before the next try: the
        server's ``retry_after`` when it gave one, the backoff's cap when ``longest`` (a failure known
        to last), else the backoff's pause. Logged at ``level`` with ``advice`` when the streak starts
        or its kind (level and advice) changes, at debug otherwise."""
        delay = self.streak.next_delay(retry_after=retry_after, longest=longest)
        self.status.connected, self.status.detail = False, f"{self.what} failed: {problem}"
        if self._kind == (level, advice):
            self._log.debug("%s failed again: %s", self.what, problem)
        else:
            self._kind = (level, advice)
            if advice:
                self._log.log(level, "%s failed (%s): %s; trying again", self.what, problem, advice)
            else:
                self._log.log(level, "%s failed (%s); trying again with a backoff", self.what, problem)
        await self._sleep(delay)

    def recovered(self) -> None:
        """The link works (again): the streak is over, the status clear; a recovery is logged once."""
        failures = self.streak.reset()
        self._kind = None
        if failures:
            self._log.info("%s recovered after %d failed attempt(s)", self.what, failures)
        self.status.connected, self.status.detail = True, ""
