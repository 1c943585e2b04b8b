"""The cluster's work queue: ``gateway.intake.work.WorkQueue`` over a Redis stream, for N gateway processes.

What the router submits is appended to one stream (``gateway.cluster.queue.work_stream``); every process
reads it in one consumer group and runs what it read with the one ``run`` function (``Worker.run``).

Contract (beyond ``gateway.intake.work.WorkQueue``'s):

- Order and exclusion per chat come from the database, not from the stream: an entry means "chat K has
  lane work up to inbox id N", and running it answers K's oldest pending lane message first, each under
  K's session lease with the row re-checked under it (``gateway.cluster.queue.chat_order``,
  ``gateway.intake.pending``). So entries delivered twice, out of order, or to two processes at once are
  harmless. In one process, the entries of one chat are run by one task, one row at a time.
- An entry is acknowledged only once nothing of its chat up to its inbox id is pending (the answers are
  in the outbox, or the rows were otherwise closed). An item cut off by :meth:`shutdown`, or a row that
  stays pending after its run (a bug, logged), leaves its entries unacknowledged: another process claims
  them once they were idle ``lease_ttl`` seconds (``XAUTOCLAIM``) and runs them as resumed attempts.
  Entries a process holds are kept fresh (``XCLAIM``) so that a long turn is never claimed away.
- Caps: a process takes at most ``local_limit`` chats at once (it reads no more entries than it has room
  for; the rest wait in Redis for any process), and each chat it runs holds one slot of the turn cap
  (``turn_cap``, ``gateway.intake.turn_cap``: this process's and the cluster-wide one, which the API's
  and cron's turns take slots of too).
- ``submit`` never blocks: entries are appended by a background task. While Redis cannot be reached they
  are kept in this process (their rows are pending in the database) and appended once it answers again,
  except those the rebuild appended meanwhile; so a message stored while Redis returns (after the
  rebuild read the database, before the queue took work again) is not left for the periodic pass.
- Redis is infrastructure: when it cannot be reached the process takes no new work (``problem`` says
  why, for ``/readyz``); turns already running go on. When it is back, the stream and group are
  created if Redis lost them, and every pending lane message of the database that has no entry gets
  one (:meth:`RedisWorkQueue.rebuild`, also done at start: a cold Redis starts from the database). A
  periodic pass does the same for messages older than ``lease_ttl`` (a process that died between
  storing a message and appending its entry).
- ``cancel_running`` and ``busy`` see the whole cluster through ``gateway.cluster.queue.control`` (records in
  Redis of what runs where, and durable cancels); they raise ``RedisUnavailable`` when Redis cannot be
  reached.
- Background tasks (keeper, reader, appender, the control's writer and listener) are
  :class:`resilience.loops.BackgroundLoop` instances: an unexpected exception is logged and the loop goes on.
- Lifecycle: :func:`open_work_queue` starts the background tasks and stops them on exit; the owner calls
  :meth:`drain` / :meth:`shutdown` before that, as for ``gateway.intake.lanes.Lanes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent.db import StorageUnavailable
from gateway.cluster.counting.semaphore import RedisSemaphore
from gateway.cluster.queue.chat_order import ChatOrder
from gateway.cluster.queue.control import ClusterControl
from gateway.cluster.queue.metrics import QueueMetrics
from gateway.cluster.queue.work_stream import Entry, QueueStats, WorkStream
from gateway.cluster.redis import KEY_PREFIX, Cluster, redis_key
from gateway.intake.lanes import INTERRUPTED, SHUTTING_DOWN
from gateway.intake.outage import until_reachable
from gateway.intake.turn_cap import TurnCap
from gateway.intake.work import Work
from gateway.server.metrics import GatewayMetrics
from resilience.cancelling import cancel_and_wait
from resilience.loops import BackgroundLoop

log = logging.getLogger(__name__)

RETRY = 1.0  # seconds between attempts to reach Redis while it is down
STATS_EVERY = 2.0  # seconds between refreshes of the queue's metrics (and trims of the stream)
FORGET_EVERY = 3600.0  # seconds between sweeps of consumers long gone
CLOSE_FLUSH = 2.0  # seconds given to appending what was submitted, and writing control records, at close
NOT_REACHED = "Redis: not reached yet"


@dataclass
class _Chat:
    """The work this process took for one chat: run by one task, one row at a time."""

    key: str
    up_to: int  # the highest inbox id among the entries taken
    entries: list[str] = field(default_factory=list)  # stream ids to acknowledge once done
    fresh: set[int] = field(default_factory=set)  # inbox ids whose entries were read for the first time
    task: asyncio.Task[None] | None = None
    running: tuple[int, asyncio.Future[None]] | None = None  # (inbox id, the run) now
    stopped: int | None = None  # the inbox id whose run was cancelled (INTERRUPTED), once


class RedisWorkQueue:
    def __init__(
        self,
        redis: Redis,
        order: ChatOrder,
        *,
        prefix: str,
        instance: str,
        local_limit: int,
        turn_cap: TurnCap,
        lease_ttl: float,
        metrics: QueueMetrics | None = None,
        on_depth: Callable[[int], None] | None = None,
    ) -> None:
        self.stream = WorkStream(redis, prefix=prefix, consumer=instance)
        self.control = ClusterControl(
            redis,
            prefix=prefix,
            instance=instance,
            ttl=lease_ttl,
            on_cancel=self._cancel_here,
            running_here=self._running_here,
        )
        self.redis = redis
        self.order = order
        self.prefix = prefix
        self.instance = instance
        self.local_limit = local_limit
        self.turn_cap = turn_cap
        self.lease_ttl = lease_ttl
        self.metrics = metrics
        self._on_depth = on_depth
        self._run: Callable[[Work], Awaitable[None]] | None = None
        self._chats: dict[str, _Chat] = {}
        self._submitted: list[Work] = []
        self._submit_event = asyncio.Event()
        self._room = asyncio.Event()  # set when a chat this process ran is done
        self._up = asyncio.Event()  # set while Redis answers
        self._served = asyncio.Event()  # set by serve(): nothing is taken before
        self._taking = True  # False once draining: read nothing more
        self._closing = False  # set by shutdown: start nothing more
        self._loops: dict[str, BackgroundLoop] = {}  # by name (start)
        self._tasks: list[asyncio.Task[None]] = []  # one-off jobs in the background
        self.problem: str | None = NOT_REACHED
        self.stats: QueueStats | None = None  # the stream's figures as last measured (every STATS_EVERY)
        self.rebuilds = 0  # times the stream was rebuilt from the database (for tests and logs)

    # --- gateway.intake.work.WorkQueue -------------------------------------------------------------------

    def serve(self, run: Callable[[Work], Awaitable[None]]) -> None:
        self._run = run
        self._served.set()

    def submit(self, item: Work) -> None:
        if self._run is None:
            raise RuntimeError("RedisWorkQueue.serve was not called: nothing would run the work")
        self._submitted.append(item)
        self._submit_event.set()

    async def cancel_running(self, key: str) -> bool:
        chat = self._chats.get(key)
        if chat is not None and chat.running is not None:
            return self._stop(chat, chat.running[0])
        elsewhere = await self.control.running_elsewhere(key)
        if elsewhere is None:
            return False
        await self.control.cancel(key, elsewhere[1])
        return True

    async def busy(self, key: str) -> bool:
        chat = self._chats.get(key)
        if chat is not None and chat.running is not None:
            return True
        return await self.control.running_elsewhere(key) is not None

    @property
    def depth(self) -> int:
        """Entries this process holds (running or waiting for a cluster slot)."""
        return sum(len(chat.entries) for chat in self._chats.values())

    @property
    def active(self) -> int:
        """Chats this process runs now."""
        return len(self._chats)

    @property
    def running(self) -> int:
        """Rows whose turn or command runs in this process now."""
        return sum(1 for chat in self._chats.values() if chat.running is not None)

    async def drain(self, seconds: float) -> bool:
        """Read nothing more and wait up to ``seconds`` for the chats taken to finish."""
        self._taking = False
        deadline = time.monotonic() + seconds
        while self._chats:
            tasks = [chat.task for chat in self._chats.values() if chat.task is not None]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.wait(tasks, timeout=remaining)
        return True

    async def shutdown(self) -> None:
        """Cancel what runs (``SHUTTING_DOWN``) and start nothing more; entries not done stay
        unacknowledged, for another process to claim."""
        self._taking = False
        self._closing = True
        runs = [chat.running[1] for chat in self._chats.values() if chat.running is not None]
        for run in runs:
            run.cancel(SHUTTING_DOWN)  # once: a second would cut its checkpoint short
        if runs:
            await asyncio.wait(runs)
        await cancel_and_wait([chat.task for chat in self._chats.values() if chat.task is not None])

    # --- readiness ----------------------------------------------------------------------------------

    async def probe(self) -> None:
        """For ``/readyz``: raises while this process takes no new work."""
        if self.problem is not None:
            raise RuntimeError(self.problem)

    def report(self) -> dict[str, object]:
        """For ``/readyz``: the queue's lag as last measured (the age in seconds of the oldest entry not
        finished, entries read and not finished, entries nobody read; null before the first
        measurement) and the rows this process runs now."""
        stats = self.stats
        return {
            "oldest_seconds": None if stats is None else round(stats.oldest_seconds, 1),
            "pending": None if stats is None else stats.pending,
            "unread": None if stats is None else stats.unread,
            "running": self.running,
        }

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        for name, loop in (
            ("keeper", self._keep),
            ("reader", self._read),
            ("appender", self._append),
            ("control writer", self.control.write),
            ("control listener", self.control.listen),
        ):
            self._loops[name] = BackgroundLoop(f"the work queue's {name}", loop).start()

    async def aclose(self) -> None:
        if not self._closing:
            await self.shutdown()
        for name in ("reader", "appender"):  # first: what is appended below is for another process to
            if name in self._loops:  # read, and a batch the appender was adding comes back to _submitted
                await self._loops[name].stop()  # (it was left to the periodic rebuild, a minute on)
        if self.problem is None:
            if self._submitted:
                with contextlib.suppress(RedisError, TimeoutError):
                    async with asyncio.timeout(CLOSE_FLUSH):
                        await self.stream.add(self._take_submitted())
            await self.control.flush(CLOSE_FLUSH)
        for loop in self._loops.values():
            await loop.stop()
        await cancel_and_wait(list(self._tasks))
        self._tasks.clear()

    # --- Redis up and down -------------------------------------------------------------------------

    def _lost(self, error: Exception) -> None:
        if self.problem is None or self.problem == NOT_REACHED:
            log.warning("Redis is unreachable (%s): taking no new work until it is back", error)
        self.problem = f"Redis: {type(error).__name__}: {error}"
        self._up.clear()
        if self.metrics is not None:
            self.metrics.redis_up.set(0)

    async def _come_back(self) -> None:
        """Redis answers (again): make sure the stream and group exist, rebuild what is missing from the
        database, then take work."""
        await self.redis.ping()
        if await self.stream.ensure_group():
            log.info("work stream %s created (Redis was empty)", self.stream.key)
        await self.rebuild()
        if self.problem not in (None, NOT_REACHED):
            log.info("Redis is back: taking work again")
        self.problem = None
        self._up.set()
        if self.metrics is not None:
            self.metrics.redis_up.set(1)

    async def rebuild(self, older_than: float = 0.0) -> int:
        """Append an entry for every pending lane message (received ``older_than`` seconds ago or
        earlier) that the stream does not name; returns how many."""
        try:
            stored = await self.order.stored_work(older_than)
        except StorageUnavailable as error:
            log.warning("rebuilding the work stream waits for the database: %s", error)
            return 0
        queued = await self.stream.queued_inbox_ids()
        missing = [work for work in stored if work.inbox_id not in queued]
        await self.stream.add(missing)
        covered = queued | {work.inbox_id for work in missing}  # submitted meanwhile: queued once
        self._submitted = [work for work in self._submitted if work.inbox_id not in covered]
        if missing:
            self.rebuilds += 1
            log.info("work stream: %d pending message(s) of the database queued again", len(missing))
        return len(missing)

    # --- background tasks ---------------------------------------------------------------------------

    async def _keep(self) -> None:
        """Reconnect when Redis was lost; otherwise keep held entries fresh, claim the entries of dead
        processes, re-queue forgotten messages, trim the stream and refresh the metrics."""
        tick = max(0.1, min(1.0, self.lease_ttl / 6))
        last = {"touch": 0.0, "stats": 0.0, "rebuild": time.monotonic(), "forget": 0.0}
        while True:
            if not self._up.is_set():
                try:
                    await self._come_back()
                except RedisError as error:
                    self._lost(error)
                    await asyncio.sleep(RETRY)
                    continue
            now = time.monotonic()
            try:
                if now - last["touch"] >= self.lease_ttl / 3:
                    last["touch"] = now
                    await self.stream.touch(entry for chat in self._chats.values() for entry in chat.entries)
                    self.control.heartbeat(self._running_here())
                await self.control.check()  # cancels whose message this process missed
                await self._claim()
                if now - last["rebuild"] >= self.lease_ttl:
                    last["rebuild"] = now
                    if await self.redis.set(f"{self.prefix}:rebuild", self.instance, nx=True,
                                            px=int(self.lease_ttl * 1000)):  # fmt: skip
                        await self.rebuild(older_than=self.lease_ttl)
                if now - last["stats"] >= STATS_EVERY:
                    last["stats"] = now
                    await self.stream.trim()
                    await self._measure()
                if now - last["forget"] >= FORGET_EVERY:
                    last["forget"] = now
                    await self.stream.forget_consumers()
            except RedisError as error:
                self._lost(error)
            await asyncio.sleep(tick)

    async def _claim(self) -> None:
        room = self.local_limit - len(self._chats)
        if not self._taking or not self._served.is_set() or room <= 0:
            return
        for entry in await self.stream.claim_idle(int(self.lease_ttl * 1000), room):
            log.info("claimed entry %s of a process that stopped (inbox %s)", entry.id,
                     entry.work.inbox_id if entry.work else "?")  # fmt: skip
            self._take(entry, resumed=True)

    async def _measure(self) -> None:
        self.stats = await self.stream.stats()
        if self.metrics is not None:
            self.metrics.show(self.stats, running=self.running)

    async def _read(self) -> None:
        """Read entries while there is room for more chats; first the entries this consumer left
        unacknowledged in an earlier life (a restart under the same ``cluster.instance_id``)."""
        own_first = True
        await self._served.wait()
        while self._taking:
            await self._up.wait()
            room = self.local_limit - len(self._chats)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                entries = await (self.stream.read_own(room) if own_first else self.stream.read(room))
            except RedisError as error:
                self._lost(error)
                continue
            for entry in entries:
                self._take(entry, resumed=own_first)
            own_first = False

    async def _append(self) -> None:
        """Append what was submitted once Redis answers; what could not be appended is kept for then
        (the rebuild when Redis is back drops what it queued itself)."""
        while True:
            await self._submit_event.wait()
            await self._up.wait()
            batch = self._take_submitted()
            try:
                await self.stream.add(batch)
            except RedisError as error:
                self._lost(error)
                self._submitted[:0] = batch
                self._submit_event.set()
                log.warning("%d message(s) wait until Redis is back", len(batch))
            except asyncio.CancelledError:  # stopped mid-append (aclose): aclose appends the batch
                self._submitted[:0] = batch  # (an entry appended twice is answered once)
                raise

    def _take_submitted(self) -> list[Work]:
        batch, self._submitted = self._submitted, []
        self._submit_event.clear()
        return batch

    # --- running a chat's work ----------------------------------------------------------------------

    def _take(self, entry: Entry, *, resumed: bool) -> None:
        work = entry.work
        if work is None:
            log.warning("work stream entry %s is not understood; dropping it", entry.id)
            self._in_background(self.stream.ack([entry.id]))
            return
        chat = self._chats.get(work.session_key)
        if chat is None:
            chat = self._chats[work.session_key] = _Chat(work.session_key, work.inbox_id)
            chat.task = asyncio.create_task(self._work_chat(chat), name=f"cluster chat {chat.key}")
        chat.entries.append(entry.id)
        chat.up_to = max(chat.up_to, work.inbox_id)
        if not (resumed or work.resumed):
            chat.fresh.add(work.inbox_id)
        self._count()

    async def _work_chat(self, chat: _Chat) -> None:
        done = False
        try:
            async with self.turn_cap.slot():
                done = await self._work_through(chat)
        except Exception:  # its entries stay unacknowledged: claimed and run again after the lease time
            log.exception("session key %s: running its work failed; it is tried again in %.0fs", chat.key,
                          self.lease_ttl)  # fmt: skip
        finally:
            self._forget(chat)
        if done:
            try:
                await self.stream.ack(chat.entries)
            except RedisError as error:  # claimed again later and found done: nothing is repeated
                self._lost(error)

    async def _work_through(self, chat: _Chat) -> bool:
        """Run ``chat``'s pending lane work, oldest first, up to its highest entry; True when nothing up
        to there is pending any more (its entries may be acknowledged)."""
        assert self._run is not None, "serve() before submit()"
        completed: set[int] = set()  # rows whose run ended normally: if one is pending again, stop
        while not self._closing:
            target = chat.up_to
            work = await self._next_work(chat.key, target)
            if work is None:
                if chat.up_to != target:
                    continue  # more entries arrived meanwhile
                self._forget(chat)  # before any await: a later entry starts a new task
                return True
            if work.inbox_id in completed:
                log.error("inbox %d stayed pending after its run; leaving it to be retried in %.0fs",
                          work.inbox_id, self.lease_ttl)  # fmt: skip
                return False
            run = asyncio.ensure_future(self._run(replace(work, resumed=work.inbox_id not in chat.fresh)))
            chat.running = (work.inbox_id, run)
            self.control.started(chat.key, work.inbox_id)
            try:
                await asyncio.wait([run])  # a cancelled run must not cancel the chat's task
            finally:
                chat.running = None
                self.control.finished(chat.key, work.inbox_id)
            if run.cancelled():
                continue  # interrupted (the row was closed) or shutting down (the loop ends)
            error = run.exception()
            if error is not None:
                log.error("inbox %d: the work failed", work.inbox_id, exc_info=error)
            completed.add(work.inbox_id)
        return False

    async def _next_work(self, key: str, up_to: int) -> Work | None:
        return await until_reachable(lambda _: self.order.next_work(key, up_to), f"chat {key}")

    def _forget(self, chat: _Chat) -> None:
        if self._chats.get(chat.key) is chat:
            del self._chats[chat.key]
            self._room.set()
            self._count()

    def _running_here(self) -> list[tuple[str, int]]:
        return [(chat.key, chat.running[0]) for chat in self._chats.values() if chat.running is not None]

    def _cancel_here(self, key: str, inbox_id: int) -> None:
        """Another process asked to stop the turn of ``key`` on row ``inbox_id`` (``/stop``, interrupt)."""
        chat = self._chats.get(key)
        if chat is not None and chat.running is not None and chat.stopped != inbox_id:
            log.info("session key %s: stopping inbox %d's turn at another process's request", key, inbox_id)
            self._stop(chat, inbox_id)

    def _stop(self, chat: _Chat, inbox_id: int) -> bool:
        """Cancel ``chat``'s run of row ``inbox_id`` (``INTERRUPTED``) once; True when it runs it."""
        if chat.running is None or chat.running[0] != inbox_id or chat.running[1].done():
            return False
        if chat.stopped != inbox_id:  # a second cancel would cut the first one's clean-up short
            chat.stopped = inbox_id
            chat.running[1].cancel(INTERRUPTED)
        return True

    def _count(self) -> None:
        if self._on_depth is not None:
            self._on_depth(self.depth)

    def _in_background(self, job: Awaitable[None]) -> None:
        async def quietly() -> None:
            with contextlib.suppress(RedisError):
                await job

        task = asyncio.create_task(quietly())
        self._tasks.append(task)
        task.add_done_callback(lambda done: self._tasks.remove(done) if done in self._tasks else None)


@asynccontextmanager
async def open_work_queue(
    redis: Redis,
    order: ChatOrder,
    *,
    prefix: str,
    instance: str,
    local_limit: int,
    turn_cap: TurnCap,
    lease_ttl: float,
    metrics: QueueMetrics | None = None,
    on_depth: Callable[[int], None] | None = None,
) -> AsyncIterator[RedisWorkQueue]:
    """A started queue (its ``serve`` still to be called before the first ``submit``), stopped on exit."""
    queue = RedisWorkQueue(
        redis,
        order,
        prefix=prefix,
        instance=instance,
        local_limit=local_limit,
        turn_cap=turn_cap,
        lease_ttl=lease_ttl,
        metrics=metrics,
        on_depth=on_depth,
    )
    queue.start()
    try:
        yield queue
    finally:
        await queue.aclose()


def cluster_work_queue(
    cluster: Cluster, order: ChatOrder, *, local_limit: int, turn_cap: TurnCap, metrics: GatewayMetrics
) -> AbstractAsyncContextManager[RedisWorkQueue]:
    """The work queue of this cluster process, each chat's work under a slot of ``turn_cap``
    (:func:`cluster_turn_cap`); its figures on ``metrics``' registry."""
    return open_work_queue(
        cluster.redis,
        order,
        prefix=KEY_PREFIX,
        instance=cluster.instance_id,
        local_limit=local_limit,
        turn_cap=turn_cap,
        lease_ttl=cluster.settings.lease_ttl,
        metrics=QueueMetrics(metrics.registry),
        on_depth=metrics.queue_depth.set,
    )


def cluster_turn_cap(cluster: Cluster, local_limit: int) -> TurnCap:
    """The turn cap of a gateway process of ``cluster``: ``local_limit`` here, and the cluster-wide cap
    (``cluster.max_concurrent_turns``) when one is set."""
    settings = cluster.settings
    total = settings.max_concurrent_turns
    if total is None:
        return TurnCap(local_limit)
    shared = RedisSemaphore(
        cluster.redis, redis_key("turns"), total, ttl=settings.lease_ttl, owner=cluster.instance_id
    )
    return TurnCap(local_limit, shared=shared)
