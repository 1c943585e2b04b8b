"""One gateway per home outside a cluster: a second ``herald gateway run`` on one ``HERALD_HOME`` is refused.

Two gateways on one home would both poll Telegram (each getting 409 conflicts), both send each reply
the outbox holds and both run each cron job. Outside a cluster a gateway takes itself for the only one
(on SQLite it is the only way to run: several processes are a cluster, on PostgreSQL), so it holds an
exclusive lock on ``gateway.lock`` in the home while it runs (:mod:`agent.files.flock`: the kernel
drops it with the process, however it ends), and a second one is refused at start, before it opens
anything, with the first one's pid. Only the gateway takes it: ``herald chat``, reports and cron
commands work beside a running gateway. With ``bots:`` the one lock of the home is enough: one process
serves all its bots (unless each bot's is a cluster).
"""

from __future__ import annotations

from pathlib import Path

from agent.files import LockHeld, take_lock
from gateway.failures import AlreadyRunning
from gateway.home import HeraldHome

GATEWAY_LOCK = "gateway.lock"


def hold_gateway_lock(home: HeraldHome) -> int:
    """Take the home's gateway lock; returns the descriptor that holds it (close it to release). Raises
    :class:`AlreadyRunning` naming the gateway that holds it, ``OSError`` when the home is unwritable."""
    try:
        return take_lock(home.root / GATEWAY_LOCK, exclusive=True)
    except LockHeld as held:
        raise AlreadyRunning(already_running(home.root, held.holders)) from None


def already_running(root: Path, holders: list[int]) -> str:
    """One sentence: which gateway runs on ``root`` and what to do instead of a second one."""
    which = f" (pid {', '.join(str(pid) for pid in holders)})" if holders else ""
    return (
        f"Another gateway{which} is running on {root}: stop it first, give each gateway its own "
        "HERALD_HOME, or run several as a cluster on PostgreSQL (cluster.redis_url); two on one home "
        "would both answer every message and run every cron job."
    )
