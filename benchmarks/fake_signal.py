"""The fake signal-cli daemon (``tests.fakes.signal.FakeSignal``) in a process of its own, for benchmarks.

The method of ``benchmarks/fake_telegram.py``: injection and the fake's records share that process's
``time.monotonic()``. A chat is a number: person ``+1555<chat>`` writes to the bot; a message's Signal
timestamp is its number. A Signal answer in a direct chat quotes nothing (the adapter quotes in groups
only), so, as for Slack, it is matched to the injected message whose tag it repeats (``c<chat>m<n>:``,
echoed by the emulator): :class:`~benchmarks.fake_telegram.Check` still finds a missing, a doubled or an
unexpected answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from benchmarks.fake_telegram import Answer, Answers, Sent, Typing
from benchmarks.platform_process import PlatformProcess
from tests.fakes.signal import BOT, FakeSignal

_TAG = re.compile(r"\b(c\d+m\d+):")


def user_of(chat: int) -> str:
    return f"+1555{chat:07d}"


def _inject(fake: FakeSignal, tags: dict[str, int], messages: list[tuple[int, str, str]]) -> list[Sent]:
    out = []
    for chat, tag, text in messages:
        user = user_of(chat)
        if user not in fake.people:
            fake.add_person(user, f"User {chat}")
        at = time.monotonic()  # stamped just before the envelope is queued (and the stream woken)
        payload = fake.message(user, f"{tag}: {text}")
        tags[tag] = int(payload["envelope"]["timestamp"])
        out.append(Sent(chat, tags[tag], tag, at))
    return out


def _answers(fake: FakeSignal, tags: dict[str, int], chats: list[int]) -> tuple[Answers, Typing]:
    """Every bot message of ``chats``: when its ``send`` made it and the last edit that changed it."""
    answers: Answers = {}
    for chat in chats:
        answers[chat] = []
        for message in fake.bot_messages(user_of(chat)):
            text = message.versions[-1][0]
            quoted = _TAG.search(text)
            answers[chat].append(
                Answer(message.timestamp, tags.get(quoted.group(1)) if quoted else None, text,
                       message.deleted, message.made, message.touched)
            )  # fmt: skip
    return answers, {chat: [] for chat in chats}


COMMANDS: dict[str, Callable[..., Any]] = {"inject": _inject, "answers": _answers}


def serve(address: str, port: int, authkey: str) -> None:
    """The child process: serve a FakeSignal from a thread, run the parent's commands."""
    fake = FakeSignal()
    tags: dict[str, int] = {}  # each injected tag's message number, kept in this process
    commands = {
        name: (lambda fake, *args, command=command: command(fake, tags, *args))
        for name, command in COMMANDS.items()
    }
    with fake.serve_in_thread() as url:
        PlatformProcess.child(address, port, authkey, fake, (url, BOT), commands)


class FakeSignalProcess(PlatformProcess):
    """``with FakeSignalProcess() as fake``: the fake daemon for the gateway's ``signal`` section."""

    module = "benchmarks.fake_signal"

    def section(self, chats: list[int]) -> dict[str, Any]:
        return {"daemon_url": self.hello[0], "allowed_users": [user_of(chat) for chat in chats]}

    def environ(self) -> dict[str, str]:
        return {"SIGNAL_ACCOUNT": self.hello[1]}
