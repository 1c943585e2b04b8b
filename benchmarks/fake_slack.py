"""The fake Slack (``tests.fakes.slack.FakeSlack``: the Web API and a Socket Mode websocket) in a process
of its own, for benchmarks: the method of ``benchmarks/fake_telegram.py`` (one clock for injection and
the fake's records; those records outside the measured process). A chat is a number: person ``U<n>``
writes in their DM channel with the bot, and the event reaches the gateway over Socket Mode.

A Slack answer in a DM carries no reference to the message it answers (no thread, no reply): it is
matched to the injected message whose tag it quotes (``c<chat>m<n>:``, echoed by the emulator), so
:class:`~benchmarks.fake_telegram.Check` still finds a missing, a doubled or an unexpected answer.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.fake_telegram import Answer, Answers, Sent, Typing
from benchmarks.platform_process import PlatformProcess
from tests.fakes.slack import FakeSlack
from tests.fakes.slack.server import APP_TOKEN, BOT_TOKEN

_TAG = re.compile(r"\b(c\d+m\d+):")


def user_of(chat: int) -> str:
    return f"U{chat}"


def number(ts: str) -> int:
    """A message's ``ts`` (seconds with six decimals, unique) as a number: its microseconds."""
    return int(ts.replace(".", ""))


def _inject(fake: FakeSlack, tags: dict[str, int], messages: list[tuple[int, str, str]]) -> list[Sent]:
    out = []
    for chat, tag, text in messages:
        user = user_of(chat)
        fake.add_user(user, f"User {chat}")
        channel = fake.dm_channel(user)
        at = time.monotonic()  # stamped just before the envelope is pushed to the socket
        event = fake.post(user, channel, f"{tag}: {text}")
        tags[tag] = number(event["ts"])
        out.append(Sent(chat, tags[tag], tag, at))
    return out


def _answers(fake: FakeSlack, tags: dict[str, int], chats: list[int]) -> tuple[Answers, Typing]:
    """Every bot message of ``chats``: when ``chat.postMessage`` made it and the last ``chat.update``."""
    edited: dict[tuple[str, str], float] = defaultdict(float)
    for call in fake.calls_to("chat.update"):
        if call.status == 200:
            key = (str(call.args.get("channel")), str(call.args.get("ts")))
            edited[key] = max(edited[key], call.time)
    answers: Answers = {}
    for chat in chats:
        channel = fake.dm_channel(user_of(chat))
        answers[chat] = []
        for message in fake.bot_messages(channel):
            quoted = _TAG.search(message.text)
            answers[chat].append(
                Answer(
                    number(message.ts),
                    tags.get(quoted.group(1)) if quoted else None,
                    message.text,
                    message.deleted,
                    message.made,
                    max(message.made, edited[(channel, message.ts)]),
                )
            )
    return answers, {chat: [] for chat in chats}


COMMANDS: dict[str, Callable[..., Any]] = {"inject": _inject, "answers": _answers}


def serve(address: str, port: int, authkey: str) -> None:
    """The child process: serve a FakeSlack from a thread, run the parent's commands."""
    fake = FakeSlack()
    tags: dict[str, int] = {}  # each injected tag's message number, kept in this process
    commands = {
        name: (lambda fake, *args, command=command: command(fake, tags, *args))
        for name, command in COMMANDS.items()
    }
    with fake.serve_in_thread() as api:
        PlatformProcess.child(address, port, authkey, fake, (api,), commands)


class FakeSlackProcess(PlatformProcess):
    """``with FakeSlackProcess() as fake``: the fake Slack for the gateway's ``slack`` section, Socket
    Mode (the bot token and the app token in :meth:`environ`)."""

    module = "benchmarks.fake_slack"

    def section(self, chats: list[int]) -> dict[str, Any]:
        return {"api_base": self.hello[0], "allowed_users": [user_of(chat) for chat in chats]}

    def environ(self) -> dict[str, str]:
        return {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}
