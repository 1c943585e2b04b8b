"""The gateway benchmark's memory measurement: RSS, C heap, SQLite heap and Python objects as chats
appear and messages accumulate (``python -m benchmarks.gateway --only memory``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
import tracemalloc
from dataclasses import dataclass
from tempfile import TemporaryDirectory

from benchmarks.concurrency import emulator_process
from benchmarks.fake_telegram import FakeTelegramProcess, rss_kb
from benchmarks.gateway_harness import busy_pool_slots, fresh_home, process_config, running_gateway, settle

# --- memory ----------------------------------------------------------------------------------------

MEMORY_COLUMNS = [
    "messages answered", "chats seen", "gateway RSS", "vs start", "malloc in use", "of which SQLite",
    "Python objects (gc)", "PTB pool slots busy when idle", "elapsed",
]  # fmt: skip
WAVE_TIMEOUT = 120.0


def mib(kb: float) -> str:
    return f"{kb / 1024:.1f} MiB"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]  # fmt: skip


def malloc_in_use_kb() -> int | None:
    """Bytes the C allocator has handed out and not got back (glibc's ``mallinfo2``): live C-heap data,
    without the free memory an allocator keeps. None where it is not glibc 2.33+."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd) // 1024


def sqlite_heap_kb() -> int | None:
    """``sqlite3_memory_used()`` of the libsqlite3 this process loaded (None where it is linked in)."""
    name = ctypes.util.find_library("sqlite3")
    if name is None:
        return None
    library = ctypes.CDLL(name)
    library.sqlite3_memory_used.restype = ctypes.c_int64
    return int(library.sqlite3_memory_used()) // 1024


def checkpoints(chats: int, total: int) -> list[int]:
    early = [chats // 4, chats // 2, chats]
    return sorted({*early, *range(2 * chats, total + 1, 2 * chats), total})


@dataclass
class MemoryRun:
    rows: list[list[str]]
    summary: str
    traces: str


async def memory(chats: int, total: int, wave: int, *, trace: bool) -> MemoryRun:
    """``total`` messages, message k to chat k mod ``chats``, ``wave`` at a time; RSS at checkpoints."""
    users = [10_000 + n for n in range(chats)]
    marks = checkpoints(chats, total)
    rss: dict[int, int] = {}
    snapshots: dict[int, tracemalloc.Snapshot] = {}
    rows: list[list[str]] = []
    stopped = ""
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, FakeTelegramProcess() as fake:
        home = fresh_home(tmp)
        config = process_config(url, fake.base_url, users, interval=1.0)
        if trace:
            tracemalloc.start(8)
        async with running_gateway(config, home, fake.token, paced=False) as gateway:
            started = time.monotonic()

            def measure(done: int) -> None:
                gc.collect()
                rss[done] = rss_kb()
                if trace:
                    snapshots[done] = tracemalloc.take_snapshot()
                delta = f"{(rss[done] - rss[0]) / 1024:+.1f} MiB" if done else ""
                busy = busy_pool_slots(gateway)
                heaps = [malloc_in_use_kb(), sqlite_heap_kb()]
                rows.append(
                    [f"{done:,}", f"{min(done, chats):,}", mib(rss[done]), delta,
                     *("n/a" if heap is None else mib(heap) for heap in heaps), f"{len(gc.get_objects()):,}",
                     str(busy), f"{time.monotonic() - started:.0f} s"]
                )  # fmt: skip

            measure(0)
            done = 0
            while done < total:
                size = min(wave, total - done, next(m for m in marks if m > done) - done)
                batch = [(users[k % chats], f"c{users[k % chats]}m{k}", "hello, how are things?")
                         for k in range(done, done + size)]  # fmt: skip
                await fake.inject_quietly(batch)  # the records stay in the fake's process
                try:
                    await settle(gateway, done + size, WAVE_TIMEOUT)
                except TimeoutError:
                    stopped = (
                        f"stopped: messages {done:,}–{done + size:,} were not all answered within "
                        f"{WAVE_TIMEOUT:.0f} s; PTB pool slots busy: {busy_pool_slots(gateway)}"
                    )
                    break
                done += size
                if done in marks:
                    measure(done)
            db_size = sum(f.stat().st_size for f in home.db_path.parent.glob(home.db_path.name + "*"))
            once, expected, problems = await fake.check(users)
            fake_rss = await fake.rss_kb()
            if stopped:
                gateway.services.settings = gateway.services.settings.model_copy(
                    update={"drain_timeout": 1.0}
                )
        if trace:
            tracemalloc.stop()
    summary = f"answered exactly once: {once}/{expected}"
    if stopped:
        return MemoryRun(rows, f"{summary}; {stopped}", "")
    per_chat = (rss[chats] - rss[chats // 4]) / (chats - chats // 4)
    after = [m for m in marks if m >= 2 * chats]
    per_k = (rss[after[-1]] - rss[after[0]]) / ((after[-1] - after[0]) / 1000) if len(after) > 1 else 0.0
    summary += (
        f"; RSS per new chat ({chats // 4:,}→{chats:,} chats): {per_chat:.1f} KiB; per 1,000 messages "
        f"once every chat exists ({after[0]:,}→{after[-1]:,}): {per_k:.0f} KiB; state.db on disk: "
        f"{mib(db_size / 1024)}; the fake Telegram process (not counted): {mib(fake_rss)}"
    )
    if problems:
        summary += "\nproblems: " + "; ".join(problems)
    traces = ""
    if trace:
        summary += "\n(RSS above includes tracemalloc's own bookkeeping: read the traced growth below)"
        traces = "\n\n".join(
            [
                growth(snapshots[chats // 4], snapshots[chats], f"{chats // 4:,} → {chats:,} chats"),
                growth(snapshots[after[0]], snapshots[after[-1]], f"{after[0]:,} → {after[-1]:,} messages"),
            ]
        )
    return MemoryRun(rows, summary, traces)


def growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, label: str, top: int = 12) -> str:
    """The allocation sites that grew most between two snapshots (tracemalloc)."""
    stats = after.compare_to(before, "traceback")
    grown = sum(s.size_diff for s in stats)
    lines = [f"tracemalloc, {label}: {grown / 1024:+.0f} KiB traced in all; largest growth:"]
    for stat in stats[:top]:
        frames = [f for f in stat.traceback if "tracemalloc" not in f.filename]
        where = " ← ".join(f"{_short(f.filename)}:{f.lineno}" for f in reversed(frames[-4:]))
        lines.append(f"  {stat.size_diff / 1024:+8.1f} KiB {stat.count_diff:+7d} blocks  {where}")
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", "/wt-gateway-bench/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename
