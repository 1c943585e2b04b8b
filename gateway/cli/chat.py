"""``herald chat``: the terminal as one more chat of the router, and the one-shot ``-q`` mode.

The terminal is a platform adapter like Telegram's (``adapters.terminal``): each line goes through the
same router, command table, turn runner and outbox as a chat message, on the shared core
(``gateway.wiring.core``). Its person is the owner (the files under ``memories/``). The terminal adds only
what a terminal needs: the read loop, Ctrl-C (stops the running answer; at the prompt it leaves),
``/quit``, which session to start in (a new one unless ``--continue``), and, for ``-q``, printing the
finished answer to stdout (notices and errors to stderr) with an exit code.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from adapters import terminal as terminal_adapter
from adapters.base import ChatType, InboundMessage
from adapters.terminal import TerminalAdapter
from agent.api import Lease, SessionRecord, pid_alive
from agent.files import valid_text
from gateway.chats import TERMINAL_SESSION_KEY, person_id
from gateway.config import HeraldConfig
from gateway.conversation.turns import start_session
from gateway.failures import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNUSABLE
from gateway.home import HeraldHome
from gateway.ledger.inbox import InboxRow, InboxState
from gateway.wiring.core import Core, finish_work, open_chat_core
from gateway.wiring.runtime import Runtime

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

log = logging.getLogger(__name__)
InputFn = Callable[[str], Awaitable[str]]
QUIT = ("/quit", "/exit")
SETTLE_POLL = 0.02
DRAIN_SECONDS = 5.0
INTERRUPTED = (
    "The last turn of this session was interrupted before it was answered; it was taken out of the "
    "conversation, so send it again if you still want an answer."
)

# The terminal's one chat, as the router names it.
TERMINAL_CHAT = InboundMessage(
    platform=terminal_adapter.PLATFORM,
    chat_id=terminal_adapter.CHAT,
    chat_type=ChatType.DIRECT,
    user_id=terminal_adapter.OWNER,
    user_name="you",
    message_id="",
    text="",
    timestamp=0.0,
)
OWNER = person_id(terminal_adapter.PLATFORM, terminal_adapter.OWNER)


class TerminalInput:
    """Reads one line at a time without blocking the event loop.

    On a terminal it uses prompt_toolkit (line editing, history, and a Ctrl-C that can interrupt the
    prompt: a blocked ``input()`` in a thread cannot be, and would hang the exit). Piped input is read
    line by line. Raises EOFError at the end of input (Ctrl-D) and KeyboardInterrupt on Ctrl-C.
    """

    def __init__(self) -> None:
        self._session: PromptSession[str] | None = None
        if sys.stdin.isatty() and sys.stdout.isatty():
            from prompt_toolkit import PromptSession  # only for a chat at a terminal, not for -q

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
class Terminal:
    """The shared core with the console adapter started: what both modes of ``herald chat`` use."""

    core: Core
    console: TerminalAdapter
    err: TextIO
    _stopping: set[asyncio.Task[bool]] = field(default_factory=set)  # Ctrl-C's cancels under way

    @property
    def runtime(self) -> Runtime:
        return self.core.services.runtime

    @asynccontextmanager
    async def lane(self) -> AsyncIterator[Lease]:
        """The terminal chat's lock, saying so once when another process holds it."""

        def waiting(holder: str) -> None:
            self.err.write("Waiting for another herald process that is using this chat…\n")
            self.err.flush()

        async with self.runtime.locks.hold(TERMINAL_SESSION_KEY, on_wait=waiting) as lease:
            yield lease

    async def begin(self, *, resume: bool, model_requested: bool) -> SessionRecord:
        """The session to talk in: the latest one when resuming, else a new one (see ``resolve``)."""
        async with self.lane() as lease:
            return await resolve(self, lease, resume=resume, model_requested=model_requested)

    async def say(self, text: str) -> InboxRow | None:
        """Hand ``text`` to the router and wait until it is answered and the answer shown."""
        message = await self.console.submit(text)
        return await self.settled(message.message_id)

    async def settled(self, message_id: str) -> InboxRow | None:
        """Wait until the message is finished and every reply to it was sent (None: not stored)."""
        services = self.core.services
        while True:
            row = await services.inbox.find(terminal_adapter.PLATFORM, self.console.chat_id, message_id)
            if row is None:
                return None
            if row.state is not InboxState.PENDING:
                items = await services.outbox.items_for(row.id)
                if all(item.state.value != "pending" for item in items):
                    return row
            await asyncio.sleep(SETTLE_POLL)

    def stop_answer(self) -> None:
        """Ctrl-C during an answer (a signal handler): stop it (the turn is closed cleanly; the chat goes
        on)."""
        stopping = asyncio.get_running_loop().create_task(
            self.core.services.lanes.cancel_running(TERMINAL_SESSION_KEY), name="stop the answer"
        )
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)


async def resolve(terminal: Terminal, lease: Lease, *, resume: bool, model_requested: bool) -> SessionRecord:
    """The latest terminal session when resuming, else a new one; says why when it starts a new one.

    A session keeps the provider and model it was built for: resuming with an explicit ``--model`` or
    ``--provider`` that differs starts a new session. A resumed session whose last turn was cut short
    by a killed process gets that turn closed, and the user is told.
    """
    runtime, err = terminal.runtime, terminal.err
    if resume:
        latest = await runtime.store.sessions.latest(TERMINAL_SESSION_KEY)
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
    started = await start_session(terminal.core.services, lease, TERMINAL_CHAT)
    for warning in started.warnings:
        err.write(f"warning: {warning}\n")
    record: SessionRecord = started.record
    return record


@asynccontextmanager
async def open_terminal(
    config: HeraldConfig,
    home: HeraldHome,
    *,
    out: TextIO,
    err: TextIO,
    live: bool,
    provider: str | None = None,
    model: str | None = None,
    context_dir: Path | None = None,
    ask: InputFn | None = None,
) -> AsyncIterator[Terminal]:
    """The core with the console started; on exit let what runs finish briefly, then close. ``ask``
    reads the answer to a question with buttons (an approval's y/n) while a turn waits for it."""
    adapter = TerminalAdapter(out, err, live=live, ask=ask)
    async with open_chat_core(
        config,
        home,
        lambda _storage: [adapter],
        owners=[OWNER],
        provider=provider,
        model=model,
        context_dir=context_dir,
    ) as core:
        await adapter.start(core.router.handle)
        await close_exited_terminals(core)
        await core.router.recover()
        terminal = Terminal(core, adapter, err)
        try:
            yield terminal
        finally:
            await core.router.close()
            await finish_work(core.services, DRAIN_SECONDS, flush_seconds=DRAIN_SECONDS)
            await adapter.stop()


async def close_exited_terminals(core: Core) -> None:
    """Cancel what terminals that have exited left unanswered: yesterday's question is not answered
    now, and another terminal still running keeps its own lines."""
    pending = await core.services.inbox.pending()
    chats = {row.message.chat_id for row in pending if row.message.platform == terminal_adapter.PLATFORM}
    gone = {chat for chat in chats if (pid := terminal_adapter.chat_pid(chat)) is None or not pid_alive(pid)}
    if await core.services.inbox.cancel_pending(terminal_adapter.PLATFORM, gone):
        log.info("cancelled the unanswered lines of %d terminal(s) that exited", len(gone))


OVER_LIMIT = "No answer: a spend limit is reached (/budget shows where this chat stands)."


@contextmanager
def ctrl_c_stops_the_answer(terminal: Terminal) -> Iterator[None]:
    """While inside, Ctrl-C (SIGINT) stops the running answer instead of interrupting the program: the
    turn is closed at once, where an interrupted program would wait for it to end before exiting."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, terminal.stop_answer)
    except (NotImplementedError, RuntimeError, ValueError):  # no signals here (a thread, Windows)
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def ask_once(terminal: Terminal, text: str, *, out: TextIO, err: TextIO) -> int:
    """``herald chat -q``: the answer on ``out`` once complete; notices and errors on ``err``."""
    if not text.strip():
        err.write("Nothing to send: give `herald chat -q` a non-empty message.\n")
        return EXIT_UNUSABLE
    with ctrl_c_stops_the_answer(terminal):
        row = await terminal.say(text)
    if row is None:
        err.write("The message was not taken (it looked like nothing to answer).\n")
        return EXIT_FAILED
    answer = [item.outgoing.text.text for item in await terminal.core.services.outbox.items_for(row.id)]
    leftover = Counter(answer)
    for sent in terminal.console.sent:  # everything else (a hygiene notice) is a remark: stderr
        if leftover[sent.text]:
            leftover[sent.text] -= 1
        else:
            err.write(sent.text + "\n")
    text_out = "\n".join(answer).strip("\n")
    if row.state is InboxState.FAILED:
        err.write(text_out.removeprefix("⚠️ ") + "\n")
        return EXIT_FAILED
    if row.state is InboxState.REFUSED:  # the chat hears of a limit once per window; a script every time
        err.write((text_out or OVER_LIMIT) + "\n")
        return EXIT_FAILED
    if row.state is InboxState.CANCELLED:
        err.write("[stopped]\n")
        return EXIT_INTERRUPTED
    body, _, notice = text_out.partition("\n\nℹ️ ")
    out.write(body + "\n")
    if notice:
        err.write(notice + "\n")
    return EXIT_OK


def chat_header(session: SessionRecord) -> str:
    return f"Herald · {session.model} · session {session.id} · /help for commands, /quit to leave\n"


async def interactive(terminal: Terminal, *, out: TextIO, read: InputFn) -> int:
    """The read loop: each line to the router; Ctrl-C stops a running answer, at the prompt it leaves."""
    while True:
        try:
            line = (await read("\n› ")).strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n")
            return EXIT_OK
        if not line:
            continue
        if line.split()[0].lower() in QUIT:
            return EXIT_OK
        with ctrl_c_stops_the_answer(terminal):
            row = await terminal.say(line)
        terminal.console.end_line()
        if row is not None and row.state is InboxState.CANCELLED:
            out.write("[stopped]\n")
        elif (
            row is not None
            and row.state is InboxState.REFUSED
            and not await terminal.core.services.outbox.items_for(row.id)  # told earlier in the window
        ):
            out.write(f"[{OVER_LIMIT}]\n")
        out.flush()
