"""CLI benchmark: what a person at a terminal waits for, and what a gateway holds once it has started.

    python -m benchmarks.cli                       # every measurement, 9 runs of each command
    python -m benchmarks.cli --runs 5 --only chat  # one measurement (version, help, chat, gateway)
    python -m benchmarks.cli --herald /work/wt/speed-before   # the herald of another checkout

Every command is a fresh process, ``python -c "from gateway.cli import main; main()" ARGS``: the
console script's entry point without the installer's wrapper. ``--herald DIR`` puts ``DIR`` first on
the children's ``PYTHONPATH``, so the same benchmark measures another checkout (a "before"); the
emulator and the fake Telegram always run from this one.

- **version, help**: ``herald --version`` and ``herald --help``.
- **chat**: ``herald chat -q "…"`` in a fresh home whose ``model.base_url`` is the provider emulator
  (``python -m tests.emulator --stream-delay 0``, in a process of its own, started here): a new
  session and one streamed answer each time, as a person asks one question. One unmeasured run first
  creates the database, so the measured runs are what every later call costs.
- **gateway**: ``herald gateway run`` with Telegram pointed at the fake Bot API (in a process of its
  own) and nothing else configured: its RSS once ``/readyz`` answers 200, and once it has answered one
  message (the provider SDK is imported when the first turn needs it). The first start (a fresh
  database: the schema is created) and a restart on the same home.

Definitions, each the median of the runs (min–max beside it):

- **CPU** is the process's CPU time, user + sys, over all its threads, from exec to exit (the kernel's
  accounting, read with ``wait4``). This is **Herald's own time**: it does not
  count the provider's work (the emulator is another process), the wait for its answer or for a core
  on a loaded machine, and it counts everything Herald chose to run: the interpreter's start, every
  import, the work. It is far steadier than wall time on a shared machine.
- **wall** is the time from spawn to exit as the benchmark sees it: what a person waits for on a quiet
  machine is close to CPU; the difference is the machine's load.
- **RSS** is the peak resident set (``ru_maxrss``) of a command, ``VmRSS`` for the gateway.
- **modules** is ``len(sys.modules)`` at exit (one extra run): a count that does not depend on load.
- **instructions** (``--instructions``: one more run of each command under ``valgrind --tool=callgrind``,
  about 50 times slower) is the count of instructions the process executed: the same on every run
  whatever the load, so it compares two checkouts on a busy machine. **Herald's own** is a chat's
  count minus the floor's ``import anthropic`` (interpreter start and the provider SDK's import).
- **floor** rows are the same measurements for ``python -c pass`` and for a process that only
  imports the provider SDK the chat uses (``import anthropic``), what no change to Herald can remove.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.fake_telegram import FakeTelegramProcess
from benchmarks.proc import rss_kb

HERE = Path(__file__).resolve().parent.parent
ENTRY = "from gateway.cli import main; main()"
# One extra run per command writes the modules it loaded, at exit, to the file named here.
COUNT_MODULES = (
    "import atexit, os, sys\n"
    "listing = lambda: '\\n'.join(sorted(sys.modules))\n"
    "atexit.register(lambda: open(os.environ['HERALD_BENCH_MODULES'], 'w').write(listing()))\n"
    + ENTRY
)
# Packages a short command should not load (their presence is reported, not asserted: tests do that).
HEAVY = ("anthropic", "openai", "sqlalchemy", "alembic", "mcp", "PIL", "pypdf", "telegram", "discord",
         "apscheduler", "aiohttp", "prompt_toolkit", "redis")  # fmt: skip
QUESTION = "What is the capital of France? Answer in one word."
READY_TIMEOUT = 120.0


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    max_rss_kb: int
    code: int


@dataclass(frozen=True)
class Row:
    label: str
    runs: list[Run]
    modules: list[str]
    instructions: int | None = None

    def cells(self) -> list[str]:
        walls = [r.wall for r in self.runs]
        cpus = [r.cpu for r in self.runs]
        heavy = sorted({name.split(".")[0] for name in self.modules} & set(HEAVY), key=str.lower)
        return [
            self.label,
            str(len(self.runs)),
            f"{statistics.median(cpus):.2f} s ({min(cpus):.2f}–{max(cpus):.2f})",
            f"{statistics.median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f})",
            f"{statistics.median(r.max_rss_kb for r in self.runs) / 1024:.0f} MiB",
            f"{len(self.modules):,}" if self.modules else "",
            ", ".join(heavy) if self.modules else "",
            f"{self.instructions / 1e9:.2f} G" if self.instructions is not None else "",
        ]


COLUMNS = ["command", "runs", "CPU p50 (min–max)", "wall p50 (min–max)", "peak RSS p50", "modules",
           "heavy packages loaded", "instructions"]  # fmt: skip


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def environment(herald: Path, home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HERALD_", "PYTHON"))}
    env.update(PYTHONPATH=os.pathsep.join(dict.fromkeys([str(herald), str(HERE)])), HERALD_HOME=str(home))
    env.update(ANTHROPIC_API_KEY="benchmark-key", OPENAI_API_KEY="benchmark-key")
    env.pop("ANTHROPIC_BASE_URL", None)
    env.pop("OPENAI_BASE_URL", None)
    env.update(extra)
    return env


def timed(argv: Sequence[str], env: dict[str, str], cwd: Path) -> Run:
    """One process to its end: wall from spawn to exit, its CPU time and peak RSS as the kernel counted
    them (``wait4``)."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if code != 0:
            err.seek(0)
            raise RuntimeError(
                f"{shlex.join(argv[3:])} exited {code}: {err.read().decode(errors='replace')[-500:]}"
            )
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, code)


def instructions(argv: Sequence[str], env: dict[str, str], cwd: Path) -> int:
    """The instructions one run of ``argv`` executed, as callgrind counted them."""
    counted = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", counted.stderr)
    if found is None:
        raise RuntimeError(f"callgrind counted nothing: {counted.stderr[-500:]}")
    return int(found.group(1))


def measure(
    label: str, code: str, args: Sequence[str], env: dict[str, str], cwd: Path, runs: int, *, count: bool
) -> Row:
    """``runs`` measured runs after one unmeasured (warm caches, a created database), then one run
    that lists the modules loaded (and with ``count``, one under callgrind)."""
    argv = [sys.executable, "-c", code, *args]
    timed(argv, env, cwd)
    measured = [timed(argv, env, cwd) for _ in range(runs)]
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as listing:
        counting = [sys.executable, "-c", COUNT_MODULES.replace(ENTRY, code), *args]
        subprocess.run(counting, env=dict(env, HERALD_BENCH_MODULES=listing.name), cwd=cwd,
                       stdout=subprocess.DEVNULL, check=True)  # fmt: skip
        modules = listing.read().split()
    return Row(label, measured, modules, instructions(argv, env, cwd) if count else None)


# --- the provider emulator and the gateway -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def emulator() -> Iterator[str]:
    """``python -m tests.emulator`` (no stream delay) in a process of its own; yields its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.emulator", "--port", str(port), "--quiet", "--stream-delay", "0"],
        stdout=subprocess.PIPE, text=True, cwd=HERE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "provider emulator at" not in line:
            raise RuntimeError(f"the emulator did not start: {line!r}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(text)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass(frozen=True)
class Start:
    ready_wall: float
    ready_cpu: float
    ready_rss_kb: int
    answered_rss_kb: int


def start_gateway(herald: Path, home: Path, work: Path, fake: FakeTelegramProcess, chat: int) -> Start:
    """``herald gateway run`` until ready, its RSS; then one message answered, its RSS; then SIGTERM."""
    port = free_port()
    config = (home / "config.yaml").read_text().split("# gateway-port")[0]
    write_config(home, config + f"# gateway-port\ngateway:\n  http_port: {port}\n  stream_edit_interval: 0\n")
    env = environment(herald, home, TELEGRAM_BOT_TOKEN=fake.token)
    argv = [sys.executable, "-c", ENTRY, "gateway", "run"]
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not ready(port):
            if process.poll() is not None:
                assert process.stderr is not None
                raise RuntimeError(
                    f"herald gateway run exited {process.returncode}: {process.stderr.read()!r}"
                )
            if time.perf_counter() - started > READY_TIMEOUT:
                raise RuntimeError("herald gateway run was not ready in time")
            time.sleep(0.02)
        start = time.perf_counter() - started
        ready_cpu, ready_rss = cpu_seconds(process.pid), rss_kb(process.pid)
        sent = fake._request("inject", [(chat, f"q{chat}", "hello")])
        deadline = time.perf_counter() + READY_TIMEOUT
        while fake._request("check", [chat])[0] < len(sent):
            if time.perf_counter() > deadline:
                raise RuntimeError("the gateway did not answer in time")
            time.sleep(0.05)
        time.sleep(0.5)  # the outbox marks the reply sent after Telegram accepted it
        return Start(start, ready_cpu, ready_rss, rss_kb(process.pid))
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def gateway_rows(herald: Path, runs: int, emulator_url: str) -> list[list[str]]:
    rows: list[list[str]] = []
    with FakeTelegramProcess() as fake, tempfile.TemporaryDirectory() as tmp:
        firsts, restarts = [], []
        for run in range(runs):
            home, work = Path(tmp) / f"home{run}", Path(tmp) / "work"
            work.mkdir(exist_ok=True)
            write_config(
                home,
                f"model:\n  base_url: {emulator_url}\ntelegram:\n  base_url: {fake.base_url}\n"
                f"  allowed_users: ['{1000 + run}', '{2000 + run}']\n",
            )
            firsts.append(start_gateway(herald, home, work, fake, 1000 + run))
            restarts.append(start_gateway(herald, home, work, fake, 2000 + run))
        for label, starts in (("first start (schema created)", firsts), ("restart", restarts)):
            rows.append([
                label, str(len(starts)),
                f"{statistics.median(s.ready_rss_kb for s in starts) / 1024:.1f} MiB",
                f"{statistics.median(s.answered_rss_kb for s in starts) / 1024:.1f} MiB",
                f"{statistics.median(s.ready_cpu for s in starts):.2f} s",
                f"{statistics.median(s.ready_wall for s in starts):.2f} s",
            ])  # fmt: skip
    return rows


GATEWAY_COLUMNS = ["herald gateway run", "runs", "RSS when ready p50", "RSS after one answer p50",
                   "CPU until ready p50", "wall until ready p50"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="measured runs of each command (default 9)")
    parser.add_argument("--gateway-runs", type=int, default=3, help="gateway starts of each kind (default 3)")
    parser.add_argument("--herald", type=Path, default=HERE, help="the checkout whose herald runs")
    parser.add_argument(
        "--only", action="append", choices=["floor", "version", "help", "chat", "gateway"],
        help="one measurement (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--instructions", action="store_true", help="count instructions (callgrind)")
    args = parser.parse_args()
    only = set(args.only or ["floor", "version", "help", "chat", "gateway"])
    herald: Path = args.herald.resolve()
    print(f"herald from {herald}; load average {os.getloadavg()[0]:.1f}; {args.runs} runs each", flush=True)
    rows: list[Row] = []
    gateway: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp, emulator() as url:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        write_config(home, f"model:\n  base_url: {url}\n")
        env = environment(herald, home)
        count = args.instructions
        if "floor" in only:
            rows.append(measure("python -c pass (floor)", "pass", [], env, work, args.runs, count=count))
            rows.append(
                measure(
                    "python -c 'import anthropic' (floor)",
                    "import anthropic",
                    [],
                    env,
                    work,
                    args.runs,
                    count=count,
                )
            )
        if "version" in only:
            rows.append(measure("herald --version", ENTRY, ["--version"], env, work, args.runs, count=count))
        if "help" in only:
            rows.append(measure("herald --help", ENTRY, ["--help"], env, work, args.runs, count=count))
        if "chat" in only:
            rows.append(
                measure(
                    "herald chat -q (emulator)",
                    ENTRY,
                    ["chat", "-q", QUESTION],
                    env,
                    work,
                    args.runs,
                    count=count,
                )
            )
        for row in rows:
            print(" · ".join(row.cells()), flush=True)
        if "gateway" in only:
            gateway = gateway_rows(herald, args.gateway_runs, url)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}\n")
    if rows:
        print(table(COLUMNS, [row.cells() for row in rows]))
    if gateway:
        print()
        print(table(GATEWAY_COLUMNS, gateway))
    if args.json:
        args.json.write_text(json.dumps(
            {"commands": [row.cells() for row in rows], "gateway": gateway, "herald": str(herald)}, indent=2
        ))  # fmt: skip


if __name__ == "__main__":
    main()
