"""Pruning what only grows, as ``storage.retention`` says: in the gateway's background (one process of a
cluster: its leader) every ``interval`` seconds, and at once by ``herald storage prune``.

Each step runs in batches of ``batch_rows``, each batch its own short transaction, and yields to the
event loop between batches: a turn waits for one batch at most, never for a whole prune. What each
step keeps is in the contracts of :mod:`agent.store.retention` and :mod:`gateway.retention.records`;
docs/storage.md has the table of every table and its policy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.api import AgentRetention
from agent.db import Storage, StorageUnavailable
from agent.settings import RetentionSettings
from gateway.retention.records import GatewayRetention, Pruned

log = logging.getLogger(__name__)

DAY = 86_400.0

Batch = Callable[[float, int, bool], Awaitable[int]]  # (before, batch, dry_run) -> rows handled


@dataclass(frozen=True)
class Step:
    what: str  # "audit rows": what a line of the report counts
    days: float  # kept this long
    batch: Batch


class Pruner:
    """One pass over every step (:meth:`prune`), or a pass every ``interval`` seconds (:meth:`run`)."""

    def __init__(
        self, storage: Storage, settings: RetentionSettings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.agent = AgentRetention(storage)
        self.gateway = GatewayRetention(storage)
        self.steps = [
            Step("inbox and outbox rows of answered messages", settings.inbox_days, self._inbox),
            Step("outbox rows of no message (sent or failed)", settings.inbox_days, self._outbox),
            Step("usage rows added up into days", settings.usage_days, self._usage),
            Step("spending windows of past days and runs", settings.usage_days, self._windows),
            Step("cache-miss events", settings.cache_miss_days, self._misses),
            Step("audit rows", settings.audit_days, self._audit),
            Step("approvals", settings.audit_days, self._approvals),
        ]

    async def prune(self, *, dry_run: bool = False) -> list[tuple[Step, int]]:
        """Every step until it finds nothing more (``dry_run``: what it would handle, changing nothing);
        the rows each step handled."""
        now = self.clock()
        batch = self.settings.batch_rows
        done = []
        for step in self.steps:
            before = now - step.days * DAY
            total = 0
            while True:
                handled = await step.batch(before, batch, dry_run)
                total += handled
                if dry_run or handled < batch:
                    break
                await asyncio.sleep(0)  # a turn's statements go before the next batch
            done.append((step, total))
        return done

    async def run(self) -> None:
        """A pass every ``interval`` seconds until cancelled; a database away is a pass skipped."""
        while True:
            try:
                done = await self.prune()
            except StorageUnavailable as error:
                log.warning("storage pruning skipped: %s", error)
            else:
                counts = ", ".join(f"{rows:,} {step.what}" for step, rows in done if rows)
                if counts:
                    log.info("storage pruned: %s", counts)
            await asyncio.sleep(self.settings.interval)

    # -- the steps ------------------------------------------------------------------------------------

    async def _files(self, pruned: Pruned) -> int:
        """Delete the files of deleted outbox rows (voice notes) nothing names any more."""
        if not pruned.files:
            return pruned.rows
        unused = pruned.files - await self.gateway.files_still_sent(sorted(pruned.files))
        await self.agent.forget_files(unused)
        return pruned.rows

    async def _inbox(self, before: float, batch: int, dry_run: bool) -> int:
        return await self._files(await self.gateway.prune_inbox(before, batch, dry_run=dry_run))

    async def _outbox(self, before: float, batch: int, dry_run: bool) -> int:
        return await self._files(await self.gateway.prune_outbox(before, batch, dry_run=dry_run))

    async def _usage(self, before: float, batch: int, dry_run: bool) -> int:
        return await self.agent.roll_up_usage(before, batch, dry_run=dry_run)

    async def _windows(self, before: float, batch: int, dry_run: bool) -> int:
        return await self.agent.prune_spend_windows(before, batch, dry_run=dry_run)

    async def _misses(self, before: float, batch: int, dry_run: bool) -> int:
        return await self.agent.prune_cache_misses(before, batch, dry_run=dry_run)

    async def _audit(self, before: float, batch: int, dry_run: bool) -> int:
        return await self.agent.prune_audit(before, batch, dry_run=dry_run)

    async def _approvals(self, before: float, batch: int, dry_run: bool) -> int:
        return await self.gateway.prune_approvals(before, batch, dry_run=dry_run)
