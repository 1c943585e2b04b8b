"""One turn at a time per session, everywhere: the per-session lock.

Everything that changes a session's conversation (a turn, session hygiene, ``/compress``, ``/new``, a
cron run) holds the lock of the session's *key* (the chat) while it works. Two turns on one session at
once would interleave their messages (user, user, assistant, assistant) and break the history the cache
holds. :class:`agent.loop.Agent` refuses to work without a :class:`Lease` for the session's key.

Implementations:

- :class:`LocalSessionLocks`: asyncio locks, one process.
- :class:`DatabaseSessionLocks`: the same, plus a lease row in the database so several processes
  (``herald chat -q --continue`` started five times at once, a gateway and a CLI; on PostgreSQL,
  gateways on several machines) take turns. A lease expires unless renewed, and a lease whose owner
  process on this host has died is taken over at once.
- ``gateway.cluster.session_locks.RedisSessionLocks``: local locks plus a lease in Redis (several
  machines), each acquisition with a fencing token that the store checks on every write the holder
  makes (:mod:`agent.storage.fencing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from agent.storage.fencing import Fence, fenced
from agent.store.leases import SessionLeases
from resilience.renewal import Policy, Renewal, Renewer

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0  # how long a lease lives without renewal (a crashed holder on another host)
RENEW_EVERY = LEASE_SECONDS / 3
POLL_FIRST = 0.02  # seconds between tries for a lease held by another process, growing to POLL_MAX
POLL_MAX = 0.25

WaitNotice = Callable[[str], None]


class LockTimeout(Exception):
    """The session stayed busy for longer than the caller was willing to wait."""


class LockNotHeld(RuntimeError):
    """A session operation was called without holding that session's lock (a programming error)."""


@dataclass
class Lease:
    """Proof of holding the lock of ``key``; valid inside the ``hold`` block that produced it.

    ``token``: the fencing token of a cross-process lease that has one (``None``: not fenced); while
    the block runs, the store refuses this task's writes once a newer token of ``key`` exists.

    ``trusted``: whether the lease is still certainly this process's by its own clock. A process paused
    past its lease (SIGSTOP, a long GC, a partition) wakes believing it holds it; the store fences its
    writes, but nothing fences a call to a platform, so such a call asks this right before it is made."""

    key: str
    held: bool = field(default=True)
    token: int | None = None
    trusted: Callable[[], bool] = field(default=lambda: True)

    def check(self, key: str) -> None:
        """Raise :class:`LockNotHeld` unless this lease holds ``key`` now."""
        if not self.held or self.key != key:
            raise LockNotHeld(f"the lock of session key {key!r} is not held (lease for {self.key!r})")


async def wait_to_take(
    key: str,
    take: Callable[[], Awaitable[str | None]],
    deadline: float | None,
    on_wait: WaitNotice | None,
) -> None:
    """Try ``take`` (None: taken; else the name of the process holding ``key``) until it succeeds,
    with growing pauses (``POLL_FIRST`` to ``POLL_MAX``); the holder is logged and told to ``on_wait``
    once. Raises :class:`LockTimeout` at ``deadline`` (``time.monotonic()``; None: no limit)."""
    delay = POLL_FIRST
    told = False
    while (holder := await take()) is not None:
        if not told:
            told = True
            log.info("session %s is busy in another process (%s); waiting", key, holder)
            if on_wait is not None:
                on_wait(holder)
        if deadline is not None and time.monotonic() + delay > deadline:
            raise LockTimeout(f"session {key!r} stayed busy in another process ({holder})")
        await asyncio.sleep(delay)
        delay = min(POLL_MAX, delay * 1.5)


class SessionLocks(ABC):
    """Per-session-key mutual exclusion.

    Contract for callers:

    - ``async with locks.hold(key) as lease:`` — inside the block no other holder of ``key`` is inside
      its own block, in this process or (for cross-process implementations) any other.
    - Within one process, waiters for a key are served in arrival order.
    - ``max_wait`` bounds the wait in seconds (``LockTimeout``); ``None`` waits as long as it takes.
    - Not re-entrant: a task that holds ``key`` must not ask for it again (it would wait forever).
    - A task cancelled while waiting holds nothing; a holder cancelled inside the block releases on exit.
    - A cross-process lease that another process took over (this holder stalled past its expiry) gets
      its holder task cancelled: the block ends rather than overlap the new holder's.
    - Memory: nothing is kept for a key once nobody holds or waits for it.
    - Fencing: when the lease has a ``token``, every ``Storage.write`` of the holding task (and of tasks
      it starts) inside the block is fenced with it (``agent.storage.fencing``); a write after a newer
      holder took the key raises ``FencedOut`` and stores nothing.
    """

    @abstractmethod
    def hold(
        self, key: str, *, max_wait: float | None = None, on_wait: WaitNotice | None = None
    ) -> contextlib.AbstractAsyncContextManager[Lease]:
        """Wait for and hold the lock of ``key``; ``on_wait`` is told once if another process has it."""

    @property
    @abstractmethod
    def held(self) -> int:
        """Keys this instance holds now (``/metrics``)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what this instance still holds (leases of a process that is shutting down)."""


@dataclass
class _Entry:
    lock: asyncio.Lock
    users: int = 0  # holders + waiters; the entry is dropped at zero


class LocalSessionLocks(SessionLocks):
    """Process-local locks: an ``asyncio.Lock`` per key, alive only while someone uses it."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @property
    def active_keys(self) -> int:
        """Keys held or waited for now (an idle gateway holds none)."""
        return len(self._entries)

    @property
    def held(self) -> int:
        return sum(1 for entry in self._entries.values() if entry.lock.locked())

    @asynccontextmanager
    async def hold(
        self, key: str, *, max_wait: float | None = None, on_wait: WaitNotice | None = None
    ) -> AsyncIterator[Lease]:
        entry = self._entries.setdefault(key, _Entry(asyncio.Lock()))
        entry.users += 1
        deadline = None if max_wait is None else time.monotonic() + max_wait
        try:
            try:
                async with asyncio.timeout(max_wait):
                    await entry.lock.acquire()
            except TimeoutError:
                raise LockTimeout(f"session {key!r} stayed busy for more than {max_wait:.0f}s") from None
            try:
                token = await self._acquire_shared(key, deadline, on_wait)
                lease = Lease(key, token=token, trusted=lambda: lease.held and self._trusted(key))
                try:
                    if lease.token is None:
                        yield lease
                    else:
                        with fenced(Fence(key, lease.token)):
                            yield lease
                finally:
                    lease.held = False
                    await asyncio.shield(self._release_shared(key))
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]

    async def _acquire_shared(
        self, key: str, deadline: float | None, on_wait: WaitNotice | None
    ) -> int | None:
        """Hook for cross-process implementations: called with the local lock held; returns the lease's
        fencing token (None: not fenced). If it raises, it holds nothing."""
        return None

    async def _release_shared(self, key: str) -> None:
        """Hook for cross-process implementations: called before the local lock is released."""

    def _trusted(self, key: str) -> bool:
        """Hook for leases that expire: whether this process's lease of ``key`` cannot have lapsed yet."""
        return True


class DatabaseSessionLocks(LocalSessionLocks):
    """Local locks plus a lease per key in the database (:class:`agent.store.leases.SessionLeases`):
    one holder per key among every process that shares the database (SQLite: processes on this
    machine; PostgreSQL: processes on any machine).

    A holder renews its lease every ``RENEW_EVERY`` seconds (:class:`resilience.renewal.Renewer`); a
    lease found taken over cancels the holder (two turns of one session must never run at once); a
    renewal that fails (the database locked or away) is tried again. Another process takes a lease over
    when it has expired or when its owner is on this host and no longer running, so a crashed process
    blocks nobody; an owner on another machine cannot be checked, so its lease is trusted until it expires.
    """

    def __init__(self, leases: SessionLeases, *, lease_seconds: float = LEASE_SECONDS) -> None:
        super().__init__()
        self._leases = leases
        self._lease_seconds = lease_seconds
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.policy = Policy(lease_seconds, every=min(RENEW_EVERY, lease_seconds / 3))
        self._renewals: dict[str, Renewer] = {}

    async def _acquire_shared(
        self, key: str, deadline: float | None, on_wait: WaitNotice | None
    ) -> int | None:
        await wait_to_take(
            key,
            lambda: self._leases.take(key, self.owner, self._lease_seconds, gone=_owner_gone),
            deadline,
            on_wait,
        )
        holding = asyncio.current_task()
        assert holding is not None, "hold() runs in a task"

        def stop_the_holder(_: object) -> None:
            log.error("the lease of session %s was taken over by another process; stopping", key)
            holding.cancel()

        lease = _DatabaseLease(self._leases, key, self.owner, self._lease_seconds)
        renewer = Renewer(lease, self.policy, name=f"the lease of session {key}", on_lost=stop_the_holder)
        renewer.confirm(renewer.attempt())
        self._renewals[key] = renewer.start()
        return None

    async def _release_shared(self, key: str) -> None:
        renewer = self._renewals.pop(key, None)
        if renewer is not None:
            await renewer.stop()
        await self._leases.release(key, self.owner)

    async def aclose(self) -> None:
        for key in list(self._renewals):
            await self._release_shared(key)


@dataclass(frozen=True)
class _DatabaseLease:
    """A session's lease row, as its renewer sees it."""

    leases: SessionLeases
    key: str
    owner: str
    seconds: float

    async def renew(self) -> Renewal:
        extended = await self.leases.extend(self.key, self.owner, self.seconds)
        return Renewal.HELD if extended else Renewal.LOST


def _owner_gone(owner: str) -> bool:
    return not owner_alive(owner)


def owner_alive(owner: str, *, hostname: str | None = None) -> bool:
    """Whether the process named by a lease owner (``host:pid:token``) may still be running.

    Only a process on this host can be checked; one elsewhere is assumed alive until its lease expires.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return True
    host, pid_text, _ = parts
    if host != (hostname or socket.gethostname()) or not pid_text.isdigit():
        return True
    return pid_alive(int(pid_text))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` on this host is running (this process counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True
