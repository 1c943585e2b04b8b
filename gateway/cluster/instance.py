"""One running gateway process per ``cluster.instance_id``.

The name is the process's consumer in the work stream (``gateway.cluster.work_stream``) and names it in
the control records (``gateway.cluster.control``): two processes given one name would share a consumer
and take each other's entries and cancels for their own, unnoticed. So a gateway process claims its
name before it takes any work: the key ``herald:instance:<id>``, whose value names the claimant's host,
pid, a random part and its machine (:func:`machine`), set with ``SET NX PX ttl`` (``ttl``:
``cluster.leader_ttl``), renewed every ``ttl / 3`` while the process runs (compare-and-pexpire) and
deleted when it stops (compare-and-delete).

A claim found taken at start is:

- taken over at once when it was made on this machine (host name, boot id and pid namespace: a pid
  says nothing about another machine or container that shares the host name) by a process that is no
  longer running: a previous life that died holding it;
- otherwise watched for ``ttl`` (plus a second): a dead holder's claim lapses within that time and is
  taken then; one still there belongs to a live process, and this one refuses to start with one
  sentence (exit 2).

A renewal that finds the claim gone (Redis restarted empty, or it lapsed while this process was
paused) takes it again; one that finds another process's claim (one started under this name while this
one could not renew) is logged as an error and makes ``/readyz`` answer 503 until it is this
process's again. Renewals that cannot reach Redis are tried again, with one warning per outage (Redis
being away is reported by the work queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from redis.asyncio import Redis

from agent.locks import pid_alive
from gateway.cluster.leader import REDIS_ERRORS, RELEASE, RENEW, milliseconds
from gateway.cluster.redis import Cluster, reaching, redis_key
from gateway.cluster.supervision import supervised
from gateway.failures import EXIT_UNUSABLE, CommandFailed

log = logging.getLogger(__name__)

MARGIN = 1.0  # seconds past a claim's TTL before a claim still there is taken for a live process's
POLL = 0.25  # seconds between looks at a claim that may lapse

# KEYS[1] the claim, ARGV[1] the value found, ARGV[2] ours, ARGV[3] the TTL in ms: 1 when replaced.
REPLACE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""


def claim_key(instance_id: str) -> str:
    return redis_key("instance", instance_id)


def machine() -> str:
    """What tells this machine and pid namespace from others that share its host name (cloned VMs,
    containers started with one ``--hostname``): the kernel's boot id and the pid namespace. Empty where
    neither can be read: then no claim is ever taken for a previous life of this process's."""
    parts = []
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8])
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid").strip("pid:[]"))
    return "-".join(parts) if len(parts) == 2 else ""


def describe(value: str) -> str:
    """Who made a claim, from its value: ``host box1, pid 4242``."""
    host, _, rest = value.partition(" ")
    return f"host {host}, pid {rest.partition(' ')[0]}"


class InstanceClaim:
    def __init__(self, redis: Redis, instance_id: str, ttl: float) -> None:
        self.redis = redis
        self.instance_id = instance_id
        self.ttl = ttl
        self.key = claim_key(instance_id)
        self.value = f"{socket.gethostname()} {os.getpid()} {secrets.token_hex(4)} {machine()}"
        self.problem: str | None = None
        self._renew = redis.register_script(RENEW)
        self._release = redis.register_script(RELEASE)
        self._replace = redis.register_script(REPLACE)

    async def take(self) -> None:
        """Claim the name (see the module); raises ``CommandFailed`` (exit 2) when a live process has it,
        ``RedisUnavailable`` when Redis cannot be reached."""
        deadline: float | None = None
        while True:
            with reaching(self.redis):
                if await self.redis.set(self.key, self.value, nx=True, px=milliseconds(self.ttl)):
                    return
                holder = await self.redis.get(self.key)
                if holder is not None and self._previous_life(str(holder)):
                    args: list[str | int] = [str(holder), self.value, milliseconds(self.ttl)]
                    if await self._replace(keys=[self.key], args=args):
                        log.info("cluster.instance_id %s: took over the claim of a process that is gone (%s)",
                                 self.instance_id, describe(str(holder)))  # fmt: skip
                        return
            if holder is None:
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.ttl + MARGIN
                log.info("cluster.instance_id %s is claimed (%s); waiting up to %.0fs for the claim to lapse",
                         self.instance_id, describe(str(holder)), deadline - now)  # fmt: skip
            if now >= deadline:
                raise CommandFailed(
                    f"cluster.instance_id {self.instance_id} is in use by a running process "
                    f"({describe(str(holder))}); give each process a name of its own "
                    "(herald gateway run --instance NAME)",
                    EXIT_UNUSABLE,
                )
            await asyncio.sleep(min(POLL, deadline - now))

    def _previous_life(self, holder: str) -> bool:
        """Whether ``holder`` is a process of this machine and pid namespace (by host name, boot id and
        namespace: a pid means nothing elsewhere) that is no longer running."""
        host, pid, _, where = [*holder.split(" "), "", "", "", ""][:4]
        here = machine()
        same = host == socket.gethostname() and bool(here) and where == here
        return same and pid.isdigit() and not pid_alive(int(pid))

    async def keep(self) -> None:
        """Renew the claim every ``ttl / 3`` until cancelled (see the module)."""
        failing = False
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                ms = milliseconds(self.ttl)
                if await self._renew(keys=[self.key], args=[self.value, ms]):
                    self._held()
                elif await self.redis.set(self.key, self.value, nx=True, px=ms):
                    log.warning("cluster.instance_id %s: claimed again (it had lapsed)", self.instance_id)
                    self._held()
                else:
                    self._lost(str(await self.redis.get(self.key)))
            except REDIS_ERRORS as error:
                if not failing:
                    log.warning("cluster.instance_id %s: the claim cannot be renewed (%s); trying again",
                                self.instance_id, error)  # fmt: skip
                failing = True
                continue
            failing = False

    def _held(self) -> None:
        if self.problem is not None:
            log.info("cluster.instance_id %s is this process's again", self.instance_id)
        self.problem = None

    def _lost(self, holder: str) -> None:
        if self.problem is None:
            log.error("cluster.instance_id %s is claimed by another process (%s): two processes share this "
                      "name; stop one of them", self.instance_id, describe(holder))  # fmt: skip
        self.problem = (
            f"cluster.instance_id {self.instance_id} is claimed by another process ({describe(holder)})"
        )

    async def probe(self) -> None:
        """For ``/readyz``: raises while another process holds this process's name."""
        if self.problem is not None:
            raise RuntimeError(self.problem)

    async def release(self) -> None:
        try:
            async with asyncio.timeout(self.ttl / 3):
                await self._release(keys=[self.key], args=[self.value])
        except REDIS_ERRORS as error:
            log.info("the claim of cluster.instance_id %s was not released (it lapses): %s", self.instance_id,
                     error)  # fmt: skip


@asynccontextmanager
async def claimed(cluster: Cluster) -> AsyncIterator[InstanceClaim]:
    """This process's name claimed for the life of the block (see the module)."""
    claim = InstanceClaim(cluster.redis, cluster.instance_id, cluster.settings.leader_ttl)
    await claim.take()
    renewing = supervised(f"the claim of cluster.instance_id {cluster.instance_id}", claim.keep)
    keeping = asyncio.create_task(renewing, name="instance claim")
    try:
        yield claim
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await claim.release()
