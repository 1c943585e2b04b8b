"""The Redis connection of a cluster process, and the name it goes by.

Redis only coordinates (leases, queues, budgets): a process that cannot reach it stops taking new
work and says so, it never loses anything. So every command is bounded: a server that stops answering
is an error after :data:`SOCKET_TIMEOUT` seconds, not a hang.
"""

from __future__ import annotations

import os
import socket

from redis.asyncio import Redis

CONNECT_TIMEOUT = 5.0
SOCKET_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 10  # seconds an idle pooled connection is trusted before a PING


def open_redis(url: str) -> Redis:
    """A client for ``url`` (``redis://[:PASSWORD@]HOST:PORT/DB``); connects on first use. Close it with
    ``await client.aclose()``."""
    return Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=SOCKET_TIMEOUT,
        health_check_interval=HEALTH_CHECK_INTERVAL,
        decode_responses=False,
    )


def default_instance_id() -> str:
    """``host-pid``: unique among the live processes of a cluster (``cluster.instance_id`` overrides it)."""
    return f"{socket.gethostname()}-{os.getpid()}"
