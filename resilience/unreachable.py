"""What "the service is away now" means, once for every service Herald depends on."""

from __future__ import annotations


class Unreachable(Exception):
    """A service Herald depends on (the database, the cluster's Redis) cannot be reached now: a state,
    not a crash. The operation that raised it did nothing that counts and may be tried again later.
    Raised at the edge where a library's own errors are translated (``agent.storage``,
    ``gateway.cluster.redis``), so that code above asks one question."""
