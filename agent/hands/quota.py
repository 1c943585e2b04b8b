"""The workspace's disk quota (``tools.workspace_quota_mb``), watched while commands run.

The sandbox bounds each file (``sandbox_file_mb``) and its scratch folders, but the workspace is a
folder of the machine: many files, or ``fallocate -l 50G`` without a sandbox, can fill the disk. No
portable way puts a quota on one folder without a file system of its own, so Herald measures it
instead: while a command runs (a foreground one or a background job), the space the workspace and
``tools.allowed_paths`` take is measured every second or so (less often when measuring takes long), and
a command during which it grew past the quota is stopped, with a sentence saying why. What it wrote
stays; a command that frees space (``rm``) is never stopped, however full the workspace is. The bound
is the quota plus what a command can write between two measurements.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.hands.file_pool import FilePool
from agent.tools.registry import ToolError

log = logging.getLogger(__name__)

MIN_INTERVAL = 1.0  # seconds between two measurements, at least
INTERVAL_FACTOR = 4.0  # ... and at least this many times what one measurement took


def usage(roots: Iterable[Path]) -> int:
    """Bytes the files under ``roots`` take on disk (allocated blocks; each file once, links not
    followed, files that vanish while walking skipped)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in roots:
        for folder, _folders, names in os.walk(root, followlinks=False):
            for name in names:
                try:
                    info = os.lstat(os.path.join(folder, name))
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * 512
    return total


class Stoppable(Protocol):
    """What the quota needs of a running command (``agent.hands.runner.Process`` is one)."""

    @property
    def pid(self) -> int: ...

    async def stop(self) -> None: ...


@dataclass
class Watch:
    """One command under watch: why it was stopped (None: it was not)."""

    reason: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class WorkspaceQuota:
    """Watches commands against ``limit_mb`` for the folders ``roots`` (the workspace first)."""

    def __init__(self, roots: Iterable[Path], limit_mb: int, pool: FilePool) -> None:
        self.roots = tuple(roots)
        self.pool = pool  # the file tools' threads: a hung disk must not take the process's default ones
        self.limit = limit_mb * 1024 * 1024
        self.limit_mb = limit_mb

    def watch(self, process: Stoppable) -> Watch:
        """Start watching ``process`` until it ends; the returned :class:`Watch` says if it was stopped."""
        watch = Watch()
        watch.task = asyncio.get_running_loop().create_task(
            self._watch(process, watch), name=f"workspace quota of {process.pid}"
        )
        return watch

    async def _watch(self, process: Stoppable, watch: Watch) -> None:
        """Measure until the caller stops watching (:func:`unwatch`, once the command ended)."""
        try:
            start, took = await self._measure()
            while True:
                await asyncio.sleep(max(MIN_INTERVAL, INTERVAL_FACTOR * took))
                now, took = await self._measure()
                if now > self.limit and now > start:
                    watch.reason = (
                        f"the workspace grew to {now / 1048576:,.0f} MB while it ran, past its quota of "
                        f"{self.limit_mb:,} MB (tools.workspace_quota_mb); what it wrote is still there: "
                        "free space before writing more"
                    )
                    log.warning("command %d stopped: %s", process.pid, watch.reason)
                    await process.stop()
                    return
        except (OSError, ToolError) as error:  # it cannot be measured (now): say so, stop nothing
            log.warning("the workspace quota cannot be watched: %s", error)

    async def _measure(self) -> tuple[int, float]:
        started = time.monotonic()
        measured = await self.pool.run(functools.partial(usage, self.roots))
        return measured, time.monotonic() - started


async def unwatch(watch: Watch | None) -> None:
    """Stop watching (the command ended, or its caller was cancelled)."""
    if watch is None or watch.task is None:
        return
    if not watch.task.done():
        watch.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch.task
