"""One running gateway process per ``cluster.instance_id``.

The name is the process's consumer in the work stream (``gateway.cluster.work_stream``) and names it in
the control records (``gateway.cluster.control``): two processes given one name would share a consumer
and take each other's entries and cancels for their own, unnoticed. So a gateway process claims its
name before it takes any work: the key ``herald:instance:<id>``, whose value names the claimant's host,
pid, a random part and its machine (:func:`machine`): a :class:`gateway.cluster.lease.RedisLease` of
``ttl`` seconds (``cluster.leader_ttl``), renewed every ``ttl / 3`` while the process runs
(:class:`resilience.renewal.Renewer`) and released when it stops.

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
process's again (renewals go on meanwhile). Renewals that cannot reach Redis are tried again, with one
warning per outage (Redis being away is reported by the work queue).
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
from gateway.cluster.lease import RedisLease
from gateway.cluster.redis import Cluster, RedisUnavailable, redis_key
from gateway.failures import EXIT_UNUSABLE, CommandFailed
from resilience.renewal import Policy, Renewal, Renewer

log = logging.getLogger(__name__)

MARGIN = 1.0  # seconds past a claim's TTL before a claim still there is taken for a live process's
POLL = 0.25  # seconds between looks at a claim that may lapse


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
        self.instance_id = instance_id
        self.ttl = ttl
        value = f"{socket.gethostname()} {os.getpid()} {secrets.token_hex(4)} {machine()}"
        self.lease = RedisLease(redis, claim_key(instance_id), value, ttl, retake=True)
        self.renewer = Renewer(self, Policy(ttl), name=f"the claim of cluster.instance_id {instance_id}")
        self.problem: str | None = None

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def value(self) -> str:
        return self.lease.value

    async def take(self) -> None:
        """Claim the name (see the module); raises ``CommandFailed`` (exit 2) when a live process has it,
        ``RedisUnavailable`` when Redis cannot be reached."""
        deadline: float | None = None
        while True:
            attempt = self.renewer.attempt()
            holder = await self.lease.take()
            if holder is None:
                self.renewer.confirm(attempt)
                return
            if self._previous_life(holder.value) and await self.lease.replace(holder.value):
                log.info("cluster.instance_id %s: took over the claim of a process that is gone (%s)",
                         self.instance_id, describe(holder.value))  # fmt: skip
                self.renewer.confirm(attempt)
                return
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.ttl + MARGIN
                log.info("cluster.instance_id %s is claimed (%s); waiting up to %.0fs for the claim to lapse",
                         self.instance_id, describe(holder.value), deadline - now)  # fmt: skip
            if now >= deadline:
                raise CommandFailed(
                    f"cluster.instance_id {self.instance_id} is in use by a running process "
                    f"({describe(holder.value)}); give each process a name of its own "
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

    async def renew(self) -> Renewal:
        """One renewal (for the :class:`Renewer`). A claim found another process's is reported (``/readyz``)
        and the renewals go on, so the claim is this process's again once the other's lapses."""
        renewal = await self.lease.renew()
        if renewal is Renewal.LOST:
            self._lost(await self.lease.holder() or "nobody")
            return Renewal.HELD
        if self.problem is not None:
            log.info("cluster.instance_id %s is this process's again", self.instance_id)
            self.problem = None
        return renewal

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
        await self.renewer.stop()
        try:
            async with asyncio.timeout(self.ttl / 3):
                await self.lease.release()
        except (RedisUnavailable, TimeoutError) as error:
            log.info("the claim of cluster.instance_id %s was not released (it lapses): %s", self.instance_id,
                     error)  # fmt: skip


@asynccontextmanager
async def claimed(cluster: Cluster) -> AsyncIterator[InstanceClaim]:
    """This process's name claimed for the life of the block (see the module)."""
    claim = InstanceClaim(cluster.redis, cluster.instance_id, cluster.settings.leader_ttl)
    await claim.take()
    claim.renewer.start()
    try:
        yield claim
    finally:
        await claim.release()
