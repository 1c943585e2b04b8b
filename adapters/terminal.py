"""The terminal as a chat platform: one chat, one person (the owner), answers printed as they stream.

``herald chat`` runs the same router, command table and turn path as Telegram and Discord, with this
adapter in place of a platform SDK. Input does not arrive by itself: the terminal's read loop hands
each line to :meth:`TerminalAdapter.submit`. Output goes to two streams: the conversation to ``out``,
remarks about the work (a retry) to ``notices``, so a transcript on stdout holds only the
conversation. With ``live`` off (``herald chat -q``) nothing is printed here: the command prints the
finished answer itself, from the outbox, and ``sent`` keeps everything else that was sent. Text is
printed as written, Markdown included, but for the lines of code fences (``adapters.text.terminal``),
streamed or not.

Buttons (an approval's Approve / Deny): with ``ask`` (the terminal's line reader) and ``live``, a message
with buttons is printed with each button's key, and the adapter reads the answer itself, while the turn
waits: the key typed is the press, handed to the sink as the button's command; the end of input is
the button whose key is ``n``. Without ``ask`` (``herald chat -q``) nobody can answer here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TextIO

from adapters.base import (
    Adapter,
    AdapterStatus,
    Button,
    Capabilities,
    ChatAddress,
    ChatType,
    DeliveryError,
    InboundMessage,
    InboundSink,
    OutboundText,
)
from adapters.text.fences import find_fences
from adapters.text.markdown import render_markdown
from adapters.text.terminal import render_terminal

PLATFORM = "cli"
CHAT = "local"  # the terminal's one conversation, whichever process the lines come from
OWNER = "owner"
UNLIMITED = 1_000_000  # a terminal shows a message of any length; split only absurd ones
NO_KEY = "n"  # the button the end of input presses (Deny)
Ask = Callable[[str], Awaitable[str]]  # shows a prompt, returns the line typed; EOFError at the end

log = logging.getLogger(__name__)


class TerminalAdapter(Adapter):
    platform = PLATFORM
    prompt_hint = (
        "You are talking with the user in a terminal. Plain text and simple Markdown (lists, code "
        "blocks) read well there; avoid tables wider than 100 columns."
    )

    def __init__(self, out: TextIO, notices: TextIO, *, live: bool, ask: Ask | None = None) -> None:
        self.out = out
        self.notices = notices
        self.live = live
        self.ask = ask if live else None
        self.capabilities = Capabilities(
            max_message_length=UNLIMITED,
            length_unit="chars",
            # At a terminal, code fence lines are hidden; `herald chat -q` prints the Markdown as written,
            # fences included, for the script or viewer it is piped into.
            render=render_terminal if live else render_markdown,
            can_edit=False,
            has_threads=False,
            appends=live,
            buttons=self.ask is not None,
        )
        self.chat_id = process_chat(os.getpid())
        self.only_chat = self.chat_id
        self.sent: list[OutboundText] = []  # with ``live`` off: what was sent, for the command to print
        self._sink: InboundSink | None = None
        self._ids = itertools.count(1)
        self._mid_line = False  # the last thing written to ``out`` did not end a line
        self._streamed = ""  # the answer appended so far (where its code fences are)
        self._line = ""  # its last line so far
        self._holding = True  # that line is not printed yet: it may be a code fence's line
        self._presses: set[asyncio.Task[None]] = set()  # questions being read (buttons)

    async def start(self, sink: InboundSink, *, receive: bool = True) -> None:
        self._sink = sink  # the terminal's lines come through submit(): always receiving

    async def stop(self) -> None:
        self._sink = None
        for task in self._presses:
            task.cancel()

    def status(self) -> AdapterStatus:
        return AdapterStatus(connected=self._sink is not None)

    async def submit(self, text: str) -> InboundMessage:
        """One line the person typed, handed to the router; returns it as stored."""
        if self._sink is None:
            raise RuntimeError("the console is not started")
        message = InboundMessage(
            platform=PLATFORM,
            chat_id=self.chat_id,
            chat_type=ChatType.DIRECT,
            user_id=OWNER,
            user_name="you",
            message_id=uuid.uuid4().hex,
            text=text,
            timestamp=time.time(),
            addressed=True,
        )
        await self._sink([message])
        return message

    async def send(
        self, address: ChatAddress, text: OutboundText, *, reply_to: str | None = None, key: str | None = None
    ) -> str:
        if self.live:
            self.end_line()
            self._write(self.out, text.text + "\n")
            if text.buttons and self.ask is not None:
                task = asyncio.create_task(self._press(text.buttons), name="console-buttons")
                self._presses.add(task)
                task.add_done_callback(self._presses.discard)
        else:
            self.sent.append(text)
        return str(next(self._ids))

    async def _press(self, buttons: tuple[Button, ...]) -> None:
        """Read which button the person takes (its key), and hand its command to the sink."""
        assert self.ask is not None
        keys = {button.shortcut.lower(): button for button in buttons if button.shortcut}
        legend = "  ".join(f"[{key}] {button.label}" for key, button in keys.items())
        chosen: Button | None = None
        while chosen is None:
            try:
                typed = (await self.ask(f"{legend} › ")).strip().lower()
            except (EOFError, KeyboardInterrupt):
                typed = NO_KEY
            chosen = keys.get(typed[:1]) if typed else None
            if chosen is None and NO_KEY not in keys:
                return
        try:
            await self.submit(chosen.command)
        except Exception:  # the sink is down: the question stays open to /approve, and expires
            log.exception("the terminal's answer %r could not be handed over", chosen.command)

    async def edit(
        self, address: ChatAddress, message_id: str, text: OutboundText, *, key: str | None = None
    ) -> None:
        raise DeliveryError("a terminal cannot edit what it printed", permanent=True)

    async def delete(self, address: ChatAddress, message_id: str) -> None:
        return None

    async def typing(self, address: ChatAddress) -> None:
        return None

    async def append(self, address: ChatAddress, text: str) -> None:
        """Print streamed text as it comes, except the lines of code fences, as ``render_terminal``
        does: a line that could be one is held until its end shows whether it is."""
        for piece in text.splitlines(keepends=True):
            self._streamed += piece
            self._line += piece
            if not self._holding:
                self._write(self.out, piece)
            elif piece.endswith("\n"):
                self._release_line()
            elif not _may_open_or_close_a_fence(self._line):
                self._write(self.out, self._line)
                self._holding = False
            if piece.endswith("\n"):
                self._line, self._holding = "", True

    def _release_line(self) -> None:
        """Print the held line unless it opens or closes a code fence of the answer so far."""
        start = len(self._streamed) - len(self._line)
        fence_line = _may_open_or_close_a_fence(self._line) and any(
            start in (fence.start, fence.close_start) for fence in find_fences(self._streamed)
        )
        if not fence_line:
            self._write(self.out, self._line)

    async def notice(self, address: ChatAddress, text: str) -> None:
        self.end_line()
        self._write(self.notices, text + "\n")

    def end_line(self) -> None:
        """Finish a streamed answer's last line, so what follows starts on a line of its own."""
        if self._holding and self._line:
            self._release_line()
        self._streamed, self._line, self._holding = "", "", True
        if self._mid_line:
            self._write(self.out, "\n")

    def _write(self, stream: TextIO, text: str) -> None:
        stream.write(text)
        stream.flush()
        if stream is self.out and text:
            self._mid_line = not text.endswith("\n")


def _may_open_or_close_a_fence(line: str) -> bool:
    """Whether ``line`` (or a line that starts like it) can be a code fence's line: three backticks or
    tildes after the indentation, or the start of them."""
    stripped = line.strip()
    return stripped.startswith(("```", "~~~")) or stripped in ("", "`", "``", "~", "~~")


def process_chat(pid: int) -> str:
    """A chat id for one terminal of process ``pid``: its lines and its answers, which no other
    terminal shows. The conversation is still the one terminal session
    (``gateway.chats.session_key``); the chat id only says who delivers the answers."""
    return f"{CHAT}-{pid}-{uuid.uuid4().hex[:8]}"


def chat_pid(chat_id: str) -> int | None:
    """The process id in a chat id made by :func:`process_chat` (None for any other chat id)."""
    parts = chat_id.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
