"""What redis-py's exceptions mean for the cluster: which say "Redis is away now", and which may come at all.

A module of its own so that the connection (``gateway.cluster.redis``) and the watch on it
(``gateway.cluster.watch``) share one definition without importing each other.
"""

from __future__ import annotations

from redis import exceptions as redis_errors

# The cluster's one "Redis is away": redis-py's errors that mean "not reachable now" (an
# AuthenticationError is one too, a ConnectionError, and so is a replica's READONLY during a failover; a
# Redis still loading its data is a ConnectionError). Converted by reaching() into RedisUnavailable.
# A pool's "Too many connections" and "No connection available." are ConnectionErrors too, which is why
# the cluster's pool has neither: a command waits its turn for a connection (gateway.cluster.pool).
UNREACHABLE: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    OSError,
    TimeoutError,
)
# Anything redis-py may raise, for callers whose use of Redis is best effort (they carry on without it).
ANY_REDIS_ERROR: tuple[type[BaseException], ...] = (redis_errors.RedisError, *UNREACHABLE)
