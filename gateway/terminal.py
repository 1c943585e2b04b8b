"""``herald chat``: the interactive terminal chat and the one-shot ``-q`` mode.

The terminal talks to the agent directly (one local user, the owner); chat platforms go through
adapters and the router instead. Every turn and command holds the terminal session's lock, so several
``herald`` processes on one home take turns instead of interleaving their messages.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TextIO

from prompt_toolkit import PromptSession

from agent.compression.engine import CompressionOutcome
from agent.events import Compressed, Retrying, TextDelta, ToolFinished, ToolStarted, TurnEvent
from agent.locks import Lease
from agent.loop import TurnResult
from agent.memory import OWNER_SCOPE
from agent.session import SessionSpec
from agent.store import SessionRecord
from agent.text import valid_text
from gateway import insights
from gateway.runtime import Runtime

CLI_SESSION_KEY = "cli:local"
CLI_SPEC = SessionSpec(
    session_key=CLI_SESSION_KEY, source="cli", platform="terminal", memory_scope=OWNER_SCOPE
)

HELP = """Commands:
  /new       start a new session (new prompt snapshot: memory edits show up)
  /compress  compress the conversation now (summary of older turns; the prompt stays cached)
  /insights  tokens, cache use and cost of this session
  /help      this list
  /quit      leave (Ctrl-D works too; Ctrl-C stops a running answer)"""

InputFn = Callable[[str], Awaitable[str]]
COMMAND = re.compile(r"/[A-Za-z][\w-]*")
NOTHING_TO_COMPRESS = "Nothing to compress: the conversation is as short as it gets."
INTERRUPTED = (
    "The last turn of this session was interrupted before it was answered; it was taken out of the "
    "conversation, so send it again if you still want an answer."
)


def command_of(line: str) -> str | None:
    """The slash command ``line`` starts with, or None: "/etc/hosts is broken" is text for the model."""
    first = line.split(maxsplit=1)[0] if line.strip() else ""
    return first.lower() if COMMAND.fullmatch(first) else None


class TerminalInput:
    """Reads one line at a time without blocking the event loop.

    On a terminal it uses prompt_toolkit (line editing, history, and a Ctrl-C that can interrupt the
    prompt: a blocked ``input()`` in a thread cannot be, and would hang the exit). Piped input is read
    line by line. Raises EOFError at the end of input (Ctrl-D) and KeyboardInterrupt on Ctrl-C.
    """

    def __init__(self) -> None:
        self._session: PromptSession[str] | None = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            self._session = PromptSession()

    async def __call__(self, prompt: str) -> str:
        if self._session is not None:
            answer: str = await self._session.prompt_async(prompt)
            return valid_text(answer)
        line: str = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            raise EOFError
        return valid_text(line.rstrip("\n"))


@dataclass
class TerminalPrinter:
    """Renders turn events as they stream: the answer to ``out``, notices (retries) to ``notices``.

    Notices go to their own stream (stderr), so a transcript on stdout holds only the conversation.
    """

    out: TextIO
    stream_text: bool = True
    notices: TextIO | None = None

    async def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, TextDelta) and self.stream_text:
            self.out.write(event.text)
        elif isinstance(event, ToolStarted):
            self.out.write(f"\n  ⚙ {event.name} …")
        elif isinstance(event, ToolFinished):
            self.out.write(" failed\n" if event.is_error else " done\n")
        elif isinstance(event, Compressed):
            self.out.write(f"\n[{describe(event.outcome)}]\n")
        elif isinstance(event, Retrying):
            note = " (discarding the partial answer)" if event.discard_partial and self.stream_text else ""
            self.out.flush()
            notices = self.notices or self.out
            notices.write(
                f"\n[provider error: {event.reason}; retry {event.attempt} in {event.delay:.1f}s{note}]\n"
            )
            notices.flush()
            if event.discard_partial and self.stream_text:
                self.out.write("\n")  # the answer starts over on a line of its own
        self.out.flush()


def describe(outcome: CompressionOutcome) -> str:
    return outcome.notice or outcome.line()


@asynccontextmanager
async def terminal_lane(runtime: Runtime, err: TextIO) -> AsyncIterator[Lease]:
    """Hold the terminal session's lock, saying so once if another process has it."""

    def waiting(holder: str) -> None:
        err.write("Waiting for another herald process that is using this chat…\n")
        err.flush()

    async with runtime.locks.hold(CLI_SESSION_KEY, on_wait=waiting) as lease:
        yield lease


async def run_hygiene(runtime: Runtime, lease: Lease, session: SessionRecord, out: TextIO) -> None:
    """Session hygiene before a turn, as the gateway does: compress a session that grew too large."""
    outcome = await runtime.agent.hygiene(lease, session)
    if outcome is not None:
        out.write(f"[{describe(outcome)}]\n")


async def resolve_session(
    runtime: Runtime, lease: Lease, resume: bool, err: TextIO, *, model_requested: bool = False
) -> SessionRecord:
    """The session to talk in: the latest one when resuming, else a new one.

    A session keeps the provider and model it was built for. Resuming with an explicit ``--model`` or
    ``--provider`` that differs starts a new session instead, and says so. A resumed session whose last
    turn was cut short by a killed process gets that turn closed, and the user is told.
    """
    if resume:
        latest = await runtime.store.latest_session(CLI_SESSION_KEY)
        if latest is None:
            err.write("No earlier terminal session to continue; starting a new one.\n")
        elif model_requested and (latest.provider, latest.model) != (runtime.provider, runtime.model):
            err.write(
                f"The last session runs on {latest.provider}/{latest.model}; started a new session for "
                f"{runtime.provider}/{runtime.model} (a session keeps its model, so its cache stays valid).\n"
            )
        else:
            if await runtime.agent.close_interrupted_turn(lease, latest):
                err.write(INTERRUPTED + "\n")
            return latest
    started = await runtime.new_session(CLI_SPEC)
    for warning in started.warnings:
        err.write(f"warning: {warning}\n")
    return started.record


async def ask_once(
    runtime: Runtime, text: str, *, resume: bool, out: TextIO, err: TextIO, model_requested: bool = False
) -> int:
    """``herald chat -q``: print the answer to ``out`` once it is complete; errors go to ``err``."""
    if not text.strip():
        err.write("Nothing to send: give `herald chat -q` a non-empty message.\n")
        return 2
    async with terminal_lane(runtime, err) as lease:
        session = await resolve_session(runtime, lease, resume, err, model_requested=model_requested)
        await run_hygiene(runtime, lease, session, err)
        result = await runtime.agent.run_turn(lease, session, text, TerminalPrinter(err, stream_text=False))
    if result.error:
        err.write(result.error + "\n")
        return 1
    out.write(result.text.rstrip("\n") + "\n")
    if result.notice:
        err.write(result.notice + "\n")
    return 0


async def _run_turn_interruptibly(
    runtime: Runtime, session: SessionRecord, text: str, out: TextIO, err: TextIO
) -> None:
    """Run a turn; Ctrl-C cancels only the turn (the agent closes it cleanly), not the chat."""

    async def turn() -> TurnResult:
        async with terminal_lane(runtime, out) as lease:
            await run_hygiene(runtime, lease, session, out)
            return await runtime.agent.run_turn(lease, session, text, TerminalPrinter(out, notices=err))

    task = asyncio.ensure_future(turn())
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, task.cancel)
        handled = True
    except (NotImplementedError, RuntimeError, ValueError):  # no signals here (Windows, a thread)
        handled = False
    try:
        result: TurnResult = await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the chat itself is being cancelled, not just this turn
        out.write("\n[stopped]\n")
        return
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
    if result.error:
        out.write(f"\n{result.error}\n")
    else:
        out.write("\n")
    if result.notice:
        out.write(f"[{result.notice}]\n")


async def interactive(
    runtime: Runtime,
    *,
    resume: bool,
    out: TextIO = sys.stdout,
    err: TextIO | None = None,
    read: InputFn | None = None,
    model_requested: bool = False,
) -> int:
    read = read or TerminalInput()
    err = err or sys.stderr
    async with terminal_lane(runtime, out) as lease:
        session = await resolve_session(runtime, lease, resume, out, model_requested=model_requested)
    out.write(f"Herald · {session.model} · session {session.id} · /help for commands\n")
    while True:
        try:
            line = (await read("\n› ")).strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n")
            return 0
        if not line:
            continue
        command = command_of(line)
        if command is not None:
            if command in ("/quit", "/exit"):
                return 0
            if command == "/help":
                out.write(HELP + "\n")
            elif command == "/new":
                async with terminal_lane(runtime, out) as lease:
                    session = await resolve_session(runtime, lease, False, out)
                out.write(f"New session {session.id}.\n")
            elif command == "/compress":
                async with terminal_lane(runtime, out) as lease:
                    outcome = await runtime.agent.compress(lease, session)
                out.write((describe(outcome) if outcome else NOTHING_TO_COMPRESS) + "\n")
            elif command == "/insights":
                latest = await runtime.store.get_session(session.id)
                out.write(insights.render([latest] if latest else []) + "\n")
            else:
                out.write(f"Unknown command {command}. Type /help for the list.\n")
            continue
        await _run_turn_interruptibly(runtime, session, line, out, err)
