"""The gateway benchmark's memory measurements: RSS, C heap, SQLite heap and Python objects as chats
appear and messages accumulate (``python -m benchmarks.gateway --only memory``), and the peak RSS
while people send huge images at the same moment (``--only images``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import io
import json
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from benchmarks.concurrency import emulator_process
from benchmarks.fake_telegram import FakeTelegramProcess
from benchmarks.gateway_harness import busy_pool_slots, fresh_home, process_config, running_gateway, settle
from benchmarks.proc import rss_kb

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


# --- huge images at once ---------------------------------------------------------------------------

IMAGE_COLUMNS = [
    "images at once", "each", "file", "decoded whole", "gateway RSS idle", "peak", "peak vs idle",
    "after", "after vs idle", "answered", "elapsed",
]  # fmt: skip


def peak_rss_kb() -> int:
    """This process's peak resident set size since the last :func:`reset_peak_rss` (``VmHWM``), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    """Start the kernel's high-water mark again from the current RSS: a peak between two samples is
    still seen."""
    Path("/proc/self/clear_refs").write_text("5")


async def images(count: int, side: int) -> list[str]:
    """``count`` people each send a ``side``×``side`` PNG of zeros (transparent black, a ~200 KB file)
    as a file at the same moment: the gateway process's peak RSS while it reads them and its RSS once
    it answered them all, against its RSS when idle just before (a small photo already answered, so
    Pillow and the rest are loaded)."""
    from tests.media_files import photo, png_file  # Pillow: not in the process of the other measurements

    users = [20_000 + n for n in range(count)]
    zeros = png_file(side, side)
    with TemporaryDirectory() as tmp, emulator_process(0.0) as url, FakeTelegramProcess() as fake:
        config = process_config(url, fake.base_url, users, interval=1.0)
        async with running_gateway(config, fresh_home(tmp), fake.token, paced=False) as gateway:
            await fake.inject_file(users[0], "warm-up", photo(600, 400), name="a.jpg", mime_type="image/jpeg")
            await settle(gateway, 1)
            gc.collect()
            reset_peak_rss()
            idle = rss_kb()
            started = time.monotonic()
            sent = [
                await fake.inject_file(user, f"image{user}", zeros, name="zeros.png", mime_type="image/png")
                for user in users
            ]
            await settle(gateway, 1 + count)
            elapsed = time.monotonic() - started
            gc.collect()
            peak, after = peak_rss_kb(), rss_kb()
            answers, _ = await fake.answers(users)
    answer_to = {(user, a.reply_to): a for user in users for a in answers[user] if not a.deleted}
    replied = {key for key, answer in answer_to.items() if "⚠️" not in answer.text}  # not a refusal
    answered = sum(1 for message in sent if (message.chat, message.message_id) in replied)
    return [
        str(count), f"{side}×{side} PNG of zeros", f"{len(zeros) / 1024:.0f} KiB",
        mib(side * side * 4 / 1024), mib(idle), mib(peak), f"{(peak - idle) / 1024:+.1f} MiB", mib(after),
        f"{(after - idle) / 1024:+.1f} MiB", f"{answered}/{count}", f"{elapsed:.1f} s",
    ]  # fmt: skip


DECODE_COLUMNS = ["7000×7000 zeros as", "file", "decoded", "estimate", "peak RSS growth", "time"]
_DECODE_ONE = """
import json, pathlib, sys, time
from agent.media.decode import plan_decode
from agent.media.images import _open, prepare_image
from agent.media.memory import DecodeBudget

def kb(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key + ":"))

data = pathlib.Path(sys.argv[1]).read_bytes()
plan = plan_decode(_open(data), data, 1568)
pathlib.Path("/proc/self/clear_refs").write_text("5")
before, started = kb("VmRSS"), time.monotonic()
prepare_image(data, name="x", max_edge=1568, max_megapixels=50, budget=DecodeBudget(10**10))
print(json.dumps([plan.route, plan.cost, (kb("VmHWM") - before) * 1024, time.monotonic() - started]))
"""


def decode_costs(side: int = 7000) -> list[list[str]]:
    """One image of each kind, ``side``×``side`` zeros, prepared in a fresh process each: how it is
    decoded, the memory estimated before, and the peak RSS growth measured (the kernel's high-water
    mark). The estimates' constants (``agent.media.decode``) come from this table."""
    from PIL import Image  # Pillow: not in the process of the other measurements

    from tests.media_files import png_file, rle_bitmap

    def saved(mode: str, image_format: str, **options: object) -> bytes:
        buffer = io.BytesIO()
        Image.new(mode, (side, side)).save(buffer, image_format, **options)
        return buffer.getvalue()

    files = {
        "PNG, 8-bit RGBA": png_file(side, side),
        "PNG, 16-bit RGBA": png_file(side, side, depth=16),
        "PNG, interlaced": png_file(side, side, interlaced=True),
        "JPEG": saved("RGB", "JPEG"),
        "JPEG, progressive": saved("RGB", "JPEG", progressive=True),
        "JPEG 2000": saved("RGB", "JPEG2000"),
        "GIF": saved("P", "GIF"),
        "WebP, lossless": saved("RGB", "WEBP", lossless=True),
        "TIFF, LZW, one strip": saved("RGB", "TIFF", compression="tiff_lzw", strip_size=2**31 - 1),
        "BMP, 8-bit RLE": rle_bitmap(side, side),
    }
    rows = []
    with TemporaryDirectory() as tmp:
        for kind, data in files.items():
            path = Path(tmp) / "image"
            path.write_bytes(data)
            ran = subprocess.run(
                [sys.executable, "-c", _DECODE_ONE, str(path)], capture_output=True, text=True, check=True
            )
            route, cost, peak, seconds = json.loads(ran.stdout)
            rows.append(
                [kind, f"{len(data) / 1024:,.0f} KiB", route, f"{cost / 2**20:,.0f} MiB",
                 f"{peak / 2**20:,.0f} MiB", f"{seconds:.1f} s"]
            )  # fmt: skip
    return rows
