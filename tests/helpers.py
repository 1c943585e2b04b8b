"""Small test helpers shared by several test modules."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from adapters.terminal import TerminalAdapter
from agent.compression.engine import CompressionOutcome
from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from agent.events import EventCallback, TurnEvent
from agent.loop import TurnResult
from agent.memory import OWNER_SCOPE
from agent.session import SessionSpec
from agent.store import SessionRecord, SessionStore
from gateway.cli.dispatch import run as herald
from gateway.config import HeraldConfig
from gateway.home import HeraldHome
from gateway.home.database import open_home_storage
from gateway.wiring.runtime import Runtime
from tests.emulator import RecordedRequest, Reply, ToolUse
from tests.fakes.waiting import PROCESS_TIMEOUT

PROJECT_NOTES = "# Project notes\n\n" + "".join(
    f"- Convention {i}: modules stay small, names are precise, and every public function is typed.\n"
    for i in range(80)
)


def write_project_notes() -> None:
    """An AGENTS.md in the working directory (~1,900 tokens): with it the prompt is over the model's
    minimum cacheable length from the first request, as it is for users with project notes or skills.
    Herald's bare prompt (~900 tokens) is under claude-sonnet-4-6's 2048-token minimum."""
    Path("AGENTS.md").write_text(PROJECT_NOTES)


SPEC = SessionSpec(
    session_key="test:chat",
    source="test",
    platform="terminal",
    memory_scope=OWNER_SCOPE,
    platform_hint=TerminalAdapter.prompt_hint,
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prompt_hashes(requests: list[RecordedRequest]) -> set[tuple[str, str]]:
    """Distinct (system, tools) byte hashes among ``requests``: 1 means every request sent the same."""
    return {(sha(r.system_json), sha(r.tools_json)) for r in requests}


def token_hit_ratio(requests: list[RecordedRequest]) -> float:
    ok = [r for r in requests if r.status == 200 and r.error is None]
    total = sum(r.prompt_tokens for r in ok)
    return sum(r.cache_read for r in ok) / total if total else 0.0


@asynccontextmanager
async def open_store(path: Path) -> AsyncIterator[SessionStore]:
    """The session store of the ``state.db`` at ``path`` (created and migrated), closed on exit."""
    async with open_storage(parse_storage_url(None, path)) as storage:
        yield SessionStore(storage)


@asynccontextmanager
async def open_home_store(home: HeraldHome) -> AsyncIterator[SessionStore]:
    """The session store of ``home`` wherever it keeps its state (state.db, or this test's PostgreSQL)."""
    async with open_home_storage(home) as storage:
        yield SessionStore(storage)


async def new_session(runtime: Runtime) -> SessionRecord:
    return (await runtime.new_session(SPEC)).record


async def run_turn(
    runtime: Runtime, session: SessionRecord, text: str, on_event: EventCallback | None = None
) -> TurnResult:
    """One turn under the session's lock, as the terminal and the gateway run it."""
    async with runtime.locks.hold(session.session_key) as lease:
        return await runtime.agent.run_turn(lease, session, text, on_event)


async def compress(runtime: Runtime, session: SessionRecord) -> CompressionOutcome | None:
    async with runtime.locks.hold(session.session_key) as lease:
        return await runtime.agent.compress(lease, session)


async def hygiene(runtime: Runtime, session: SessionRecord) -> CompressionOutcome | None:
    async with runtime.locks.hold(session.session_key) as lease:
        return await runtime.agent.hygiene(lease, session)


def without_markers(wire: dict) -> dict:
    """A wire message as stored: the request adds ``cache_control`` markers to copies of its blocks."""
    content = wire.get("content")
    if not isinstance(content, list):
        return wire
    blocks = [
        {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b for b in content
    ]
    return {**wire, "content": blocks}


class EventLog:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    async def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)


SUMMARY_TASK = "[Herald: context compression]"


def is_summary_request(request: RecordedRequest) -> bool:
    return SUMMARY_TASK in json.dumps(request.json.get("messages", [])[-1:])


class ChatResponder:
    """An emulated model for long chats: long answers, a tool call when asked, faithful summaries.

    A summary repeats every ``FACT-n`` marker it was shown, like a model that keeps what matters, so a
    test can check which facts reached the summarizer (and survived into later summaries).
    """

    def __init__(self, reply_tokens: int = 1000) -> None:
        self.reply_tokens = reply_tokens
        self.summaries: list[str] = []

    def __call__(self, body: dict, api: str) -> Reply | None:
        last = json.dumps(body["messages"][-1])
        if SUMMARY_TASK in last:
            facts = sorted(
                set(re.findall(r"FACT-\d+", json.dumps(body["messages"]))), key=lambda f: int(f[5:])
            )
            text = "## Goal\nHelp the user.\n## Critical Context\n" + " ".join(facts)
            self.summaries.append(text)
            return Reply(text=text)
        if "USE-TOOL" in last and "tool_result" not in last and '"role":"tool"' not in last.replace(" ", ""):
            return Reply(tool_calls=[ToolUse("todo", {})])
        return Reply(text_tokens=self.reply_tokens)


def assert_well_formed(request: RecordedRequest) -> None:
    """Roles alternate (Anthropic wire) and every tool_use has its tool_result in the next message."""
    messages = request.json["messages"]
    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles)), roles
    for index, message in enumerate(messages):
        calls = {b["id"] for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_use"}
        if calls:
            results = {
                b["tool_use_id"] for b in messages[index + 1]["content"] if b.get("type") == "tool_result"
            }
            assert calls == results, (calls, results)
        if message["role"] == "user" and index:
            previous = messages[index - 1]["content"]
            wanted = {b["id"] for b in previous if isinstance(b, dict) and b.get("type") == "tool_use"}
            got = {b["tool_use_id"] for b in message["content"] if b.get("type") == "tool_result"}
            assert got <= wanted, (got, wanted)


async def herald_cli(*args: str) -> str:
    """``herald ARGS`` in this process (off the event loop: it runs its own), returning its stdout."""

    def call() -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = herald(list(args))
        assert code == 0, err.getvalue()
        return out.getvalue()

    return await asyncio.to_thread(call)


HERALD = [sys.executable, "-m", "gateway"]


@dataclass
class Ran:
    """A finished ``herald`` command: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def herald_process(
    home: HeraldHome, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None
) -> Ran:
    """``herald ARGS`` in a new process (about 3 s: the SDK import): only where a process boundary matters."""
    environment = {**os.environ, "HERALD_HOME": str(home.root), **(env or {})}
    done = subprocess.run(
        [*HERALD, *args],
        env=environment,
        capture_output=True,
        timeout=PROCESS_TIMEOUT,
        cwd=Path.cwd(),
        input=stdin,
    )
    return Ran(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


def point_at(home: HeraldHome, url: str) -> None:
    """Point the home's config at the emulator, with fast retries."""
    from gateway.config import set_value

    set_value(home.config_path, "model.base_url", url)
    set_value(home.config_path, "model.retry_base_delay", "0.01")


@dataclass
class TerminalChat:
    """What ``herald chat`` printed for a scripted session, and its exit code."""

    code: int
    out: str
    err: str


async def chat_in_terminal(
    config: HeraldConfig, home: HeraldHome, *lines: str, resume: bool = False
) -> TerminalChat:
    """Run the interactive terminal in this process on ``lines`` (end with "/quit")."""
    from gateway.cli.chat import chat_header, interactive, open_terminal

    queue = iter(lines)

    async def read(prompt: str) -> str:
        return next(queue)

    out, err = io.StringIO(), io.StringIO()
    async with open_terminal(
        config, home, out=out, err=err, live=True, context_dir=Path.cwd(), ask=read
    ) as terminal:
        session = await terminal.begin(resume=resume, model_requested=False)
        out.write(chat_header(session))
        code = await interactive(terminal, out=out, read=read)
    return TerminalChat(code, out.getvalue(), err.getvalue())
