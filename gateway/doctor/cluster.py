"""``herald doctor``'s look at the cluster's Redis (``cluster.redis_url``), changing nothing.

- whether it answers (within the doctor's timeout), and its version (7 or newer recommended; the
  work queue needs 6.2's ``XAUTOCLAIM``);
- its persistence (``save``, ``appendonly``): Herald keeps nothing in Redis it cannot rebuild from the
  database, so none is needed; only ``appendfsync always`` is worth a warning (every lease renewal
  waits for the disk);
- its eviction policy: with a ``maxmemory`` limit, anything but ``noeviction`` may evict leases;
- its room for clients: ``maxclients`` against the clients connected now and the connections one more
  process opens (``cluster.redis_connections``): a process Redis refuses cannot join the cluster.

Nothing is checked when ``cluster.redis_url`` is not set (one process needs no Redis). The URL is
only ever shown without its password.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from gateway.cluster.redis import connect, redact, redis_url
from gateway.config import ConfigError
from gateway.doctor.findings import DoctorContext, Finding
from gateway.home import load_env

SUBJECT = "redis"
MIN_REDIS = (6, 2)  # XAUTOCLAIM (the work queue)
RECOMMENDED_REDIS = (7, 0)


@dataclass(frozen=True)
class RedisFacts:
    version: str  # "7.0.15"
    settings: dict[str, str]  # CONFIG GET's answers; empty when CONFIG is not allowed
    aof_enabled: bool  # from INFO persistence, readable even without CONFIG
    connected: int  # clients connected now (INFO clients), this check's own included


async def check_redis(ctx: DoctorContext) -> list[Finding]:
    if ctx.config is None:
        return []  # check_config said why
    if ctx.config.cluster.redis_url is None:
        return []
    try:
        load_env(ctx.home, ctx.environ)  # cluster.redis_url may name a variable kept in .env
        url = redis_url(ctx.config, ctx.home, ctx.environ)
        assert url is not None
        client = connect(url)
    except (ConfigError, OSError) as error:
        return [Finding("fail", SUBJECT, str(error))]
    where = redact(url)
    try:
        async with asyncio.timeout(ctx.timeout):
            facts = await read_facts(client)
    except TimeoutError:
        return [Finding("fail", SUBJECT, f"{where} did not answer within {ctx.timeout:.0f}s.")]
    except (RedisError, OSError) as error:  # refused, unreachable, a password it does not take
        detail = " ".join(str(error).split())[:200] or type(error).__name__
        return [
            Finding(
                "fail",
                SUBJECT,
                f"{where} cannot be reached ({detail}); check that Redis is running and cluster.redis_url "
                "(with its password) is right.",
            )
        ]
    finally:
        await client.aclose()
    per_process = ctx.config.cluster.redis_connections
    room = clients_finding(facts, per_process)
    return [version_finding(where, facts.version), *settings_findings(facts), *([room] if room else [])]


async def read_facts(client: Redis) -> RedisFacts:
    await client.ping()
    version = str((await client.info("server")).get("redis_version", "?"))
    aof = bool(int((await client.info("persistence")).get("aof_enabled", 0)))
    connected = int((await client.info("clients")).get("connected_clients", 0))
    settings: dict[str, str] = {}
    for name in ("save", "appendonly", "appendfsync", "maxmemory", "maxmemory-policy", "maxclients"):
        try:
            answer = await client.config_get(name)
            settings.update({str(key): str(value) for key, value in answer.items()})
        except ResponseError:  # CONFIG renamed or forbidden (managed Redis): say what INFO tells
            return RedisFacts(version, {}, aof, connected)
    return RedisFacts(version, settings, aof, connected)


def version_finding(where: str, version: str) -> Finding:
    text = f"{where} answers: Redis {version}"
    number = _version_tuple(version)
    if number < MIN_REDIS:
        return Finding("fail", SUBJECT, f"{text}; Herald needs Redis 6.2 or newer (7 recommended).")
    if number < RECOMMENDED_REDIS:
        return Finding("warn", SUBJECT, f"{text}; Herald is tested on Redis 7: upgrading is recommended.")
    return Finding("ok", SUBJECT, f"{text}.")


def settings_findings(facts: RedisFacts) -> list[Finding]:
    settings = facts.settings
    needless = "Herald keeps nothing in Redis it cannot rebuild from the database, so none is needed"
    if not settings:
        aof = "on" if facts.aof_enabled else "off"
        text = f"persistence: append-only file {aof} (CONFIG is not allowed here); {needless}."
        return [Finding("ok", SUBJECT, text)]
    findings: list[Finding] = []
    appendonly = settings.get("appendonly", "no")
    persistence = f"persistence: save '{settings.get('save', '')}', appendonly {appendonly}"
    if appendonly == "yes" and settings.get("appendfsync") == "always":
        findings.append(
            Finding(
                "warn",
                SUBJECT,
                f"{persistence}, appendfsync always: every lease renewal waits for the disk; {needless}: "
                "set appendfsync everysec, or appendonly no.",
            )
        )
    else:
        findings.append(Finding("ok", SUBJECT, f"{persistence}; {needless}."))
    policy = settings.get("maxmemory-policy", "noeviction")
    if settings.get("maxmemory", "0") != "0" and policy != "noeviction":
        findings.append(
            Finding(
                "warn",
                SUBJECT,
                f"maxmemory-policy {policy} with a maxmemory limit may evict session leases and queued work "
                "when memory runs short; set maxmemory-policy noeviction.",
            )
        )
    return findings


def clients_finding(facts: RedisFacts, per_process: int) -> Finding | None:
    """Whether Redis has room for one more gateway process (``per_process``: its
    ``cluster.redis_connections``); None when ``maxclients`` cannot be read (CONFIG not allowed)."""
    raw = facts.settings.get("maxclients", "")
    if not raw.isdigit():
        return None
    maxclients = int(raw)
    room = max(0, maxclients - facts.connected)
    text = (
        f"clients: {facts.connected} connected, maxclients {maxclients}: room for {room // per_process} more "
        f"gateway process(es) of {per_process} connections each (cluster.redis_connections, per bot)"
    )
    if room < per_process:
        return Finding(
            "warn",
            SUBJECT,
            f"{text}; another process would be refused connections: raise maxclients, or lower "
            "cluster.redis_connections.",
        )
    return Finding("ok", SUBJECT, f"{text}.")


def _version_tuple(version: str) -> tuple[int, ...]:
    numbers: list[int] = []
    for part in version.split(".")[:3]:
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)
