"""The cluster's Redis: one bounded pool of connections per process, opened at start-up, and "unreachable".

``cluster.redis_url`` turns cluster mode on. :func:`open_cluster` connects and pings at start-up, so a
Redis that is not there is one sentence and exit 2 (:class:`RedisUnavailable` through
``gateway.failures``), never a traceback; the URL is only ever shown without its password
(:func:`redact`). Every part of the cluster (session leases, the work queue, the leader lease, shared
send pacings) uses the one :class:`Cluster` the runtime opened (``runtime.cluster``).

Contract for users of :attr:`Cluster.redis`:

- Replies are ``str`` (``decode_responses``). Keys are named with :func:`redis_key` (one prefix for
  Herald's keys; one Redis database per bot).
- Every command is bounded: a connection is given up after :data:`CONNECT_TIMEOUT` seconds and an
  answer after :data:`SOCKET_TIMEOUT` seconds (a blocking command such as ``XREADGROUP BLOCK`` must
  block for less); a dropped connection is retried :data:`RETRIES` times, then the command raises.
- Connections are few (``cluster.redis_connections``, ``gateway.cluster.pool``): a command waits its
  turn when all are in use. So nothing may hold one for long but the listeners counted in
  :data:`gateway.config.REDIS_LISTENERS` (a new pub/sub channel or blocking read is one more there).
- A Redis that cannot be reached is a state, not a crash: translate redis-py's errors with
  :func:`reaching` into :class:`RedisUnavailable`, which is handled wherever a database that cannot be
  reached is (the worker waits and runs the work again; adapters hand messages over again).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from agent.db import StorageUnavailable
from gateway.cluster.pool import BoundedPool, RedisConnections, bounded_pool, free, measure
from gateway.cluster.redis_errors import UNREACHABLE
from gateway.cluster.watch import ConnectionWatch
from gateway.config import REDIS_CONNECTIONS, ClusterSettings, ConfigError, HeraldConfig
from gateway.home import HeraldHome, from_environment
from resilience.loops import BackgroundLoop

CONNECT_TIMEOUT = 5.0
SOCKET_TIMEOUT = 10.0
START_TIMEOUT = 15.0  # the first PING at start-up, retries included
HEALTH_CHECK_SECONDS = 15  # a pooled connection idle for longer is PINGed before it is used
RETRIES = 2
KEY_PREFIX = "herald"  # every key and channel of the cluster starts with it (one bot per Redis database)
RELEASES = f"{KEY_PREFIX}:released"  # the channel where a released leader or shard lease's key is published


class RedisUnavailable(StorageUnavailable):
    """The cluster's Redis cannot be reached now (down, restarting, a network partition, a refused
    password). Nothing that matters is lost: the work waits and runs again once Redis is back. A
    StorageUnavailable (so a ``resilience.unreachable.Unreachable``) so that everything that waits out a
    database that is away waits this out too."""


def redact(url: str) -> str:
    """``url`` with its password (in the address or as ``?password=``) replaced by ``***``: for logs,
    errors and doctor."""
    parts = urlsplit(url)
    if parts.password is not None:
        address = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{address}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "password" for name, _ in query):
        hidden = [(name, "***" if name == "password" else value) for name, value in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    redacted = urlunsplit(parts)
    if not parts.netloc and url.startswith(f"{parts.scheme}://"):  # unix:///path keeps its slashes
        redacted = redacted.replace(f"{parts.scheme}:", f"{parts.scheme}://", 1)
    return redacted


def redis_key(*parts: str) -> str:
    """A key of Herald's in the cluster's Redis: ``herald:<part>:<part>...``."""
    return ":".join((KEY_PREFIX, *parts))


def default_instance_id() -> str:
    """``host-pid``: unique among running processes, readable in logs and /metrics."""
    return f"{socket.gethostname()}-{os.getpid()}"


def instance_id(settings: ClusterSettings) -> str:
    """This process's name in the cluster: ``cluster.instance_id``, or host-pid."""
    return settings.instance_id or default_instance_id()


def redis_url(config: HeraldConfig, home: HeraldHome, environ: Mapping[str, str] | None = None) -> str | None:
    """``cluster.redis_url`` resolved (``$NAME`` from the environment); None: no cluster."""
    raw = config.cluster.redis_url
    return None if raw is None else from_environment(raw, "cluster.redis_url", home, environ)


def connect(url: str, connections: int = REDIS_CONNECTIONS) -> Redis:
    """A client (a pool of ``connections`` with the watch's, connecting lazily) with Herald's bounds; a
    URL Redis does not take is a ConfigError."""
    try:
        pool = bounded_pool(
            url,
            connections,
            decode_responses=True,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            health_check_interval=HEALTH_CHECK_SECONDS,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.1), RETRIES),
        )
    except ValueError as error:
        raise ConfigError(
            f"cluster.redis_url {redact(url)} is not a Redis URL ({error}); use "
            "redis://[:PASSWORD@]HOST:PORT/DB, rediss://... (TLS) or unix:///PATH/redis.sock"
        ) from None
    return Redis.from_pool(pool)


def target(client: Redis) -> str:
    """Where ``client`` connects, without credentials: ``redis 10.0.0.5:6379/0``."""
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
    return f"redis {where}/{kwargs.get('db', 0)}"


def unavailable(client: Redis, error: BaseException) -> RedisUnavailable:
    detail = " ".join(str(error).split())[:200] or type(error).__name__
    return RedisUnavailable(
        f"the cluster's Redis ({target(client)}) cannot be reached ({detail}); check that Redis is "
        "running and cluster.redis_url is right"
    )


@contextmanager
def reaching(client: Redis) -> Iterator[None]:
    """Run Redis commands; one that could not reach Redis raises :class:`RedisUnavailable`."""
    try:
        yield
    except UNREACHABLE as error:
        raise unavailable(client, error) from error


class PoolExhausted(Exception):
    """Every connection of this process's pool stayed in use while a PING waited for one: Redis may be
    fine; this process holds them (a bug, or far more than cluster.redis_connections was sized for)."""


async def ping(client: Redis, seconds: float) -> None:
    """PING within ``seconds``; raises :class:`RedisUnavailable` otherwise (:class:`PoolExhausted` when
    no connection of the pool was free for that long)."""
    try:
        async with asyncio.timeout(seconds):
            await client.ping()
    except TimeoutError:
        pool = client.connection_pool
        if isinstance(pool, BoundedPool) and not free(pool):
            raise PoolExhausted(
                f"no connection to the cluster's Redis was free within {seconds:.0f}s: all "
                f"{pool.max_connections} pooled ones are in use (cluster.redis_connections)"
            ) from None
        raise unavailable(client, TimeoutError(f"no answer within {seconds:.0f}s")) from None
    except UNREACHABLE as error:
        raise unavailable(client, error) from error


@dataclass(frozen=True)
class Cluster:
    """This process's part in a cluster: its name, the shared Redis connection, and the watch that
    tells the holders of leases at once when the connection to Redis breaks (``watch``)."""

    instance_id: str
    redis: Redis
    settings: ClusterSettings
    watch: ConnectionWatch

    async def probe(self) -> None:
        """Readiness: Redis answers (raises :class:`RedisUnavailable` otherwise)."""
        await ping(self.redis, CONNECT_TIMEOUT)

    def connections(self) -> RedisConnections:
        """This process's connections to Redis now (``/metrics``)."""
        pool = self.redis.connection_pool
        assert isinstance(pool, BoundedPool), "a Cluster's client comes from connect()"
        return measure(pool, self.watch.redis.connection_pool)


@asynccontextmanager
async def open_redis(url: str, connections: int = REDIS_CONNECTIONS) -> AsyncIterator[Redis]:
    """Connect to ``url`` (``connections``: :func:`connect`) and PING it (so a Redis that is not there is
    reported at start-up); the connections are closed on exit."""
    client = connect(url, connections)
    try:
        await ping(client, START_TIMEOUT)
        yield client
    finally:
        await client.aclose()


@asynccontextmanager
async def open_cluster(
    config: HeraldConfig, home: HeraldHome, environ: Mapping[str, str] | None = None
) -> AsyncIterator[Cluster]:
    """The cluster ``cluster.redis_url`` names (it must be set), connected; closed on exit."""

    url = redis_url(config, home, environ)
    if url is None:
        raise ValueError("cluster.redis_url is not set: this process is not part of a cluster")
    async with open_redis(url, config.cluster.redis_connections) as client:
        watch = ConnectionWatch(client, RELEASES)
        try:
            async with BackgroundLoop("the Redis connection watch", watch.run):
                yield Cluster(instance_id(config.cluster), client, config.cluster, watch)
        finally:
            await watch.aclose()
