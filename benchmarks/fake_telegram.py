"""The fake Telegram Bot API (``tests.fakes.FakeTelegram``) in a process of its own, for benchmarks.

Injection and the fake's call log share that process's ``time.monotonic()``, so a latency is the
difference of two readings of one clock; and what the fake keeps (every update, call and message) is
not counted in the memory of the gateway under test.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.platform_process import PlatformProcess
from benchmarks.proc import rss_kb
from tests.fakes import FakeTelegram


@dataclass(frozen=True)
class Sent:
    """One user message as injected: its chat, message id, tag and ``time.monotonic()`` at injection."""

    chat: int
    message_id: int
    tag: str
    at: float


@dataclass(frozen=True)
class Answer:
    """A bot message as the fake holds it, with the arrival times of the calls that made it."""

    message_id: int
    reply_to: int | None
    text: str
    deleted: bool
    first: float  # the sendMessage that created it
    final: float  # the last sendMessage/editMessageText that touched it


Answers = dict[int, list[Answer]]
Typing = dict[int, list[float]]


@dataclass
class Check:
    """Every injected message answered exactly once, by the model's answer to it."""

    expected: int = 0
    once: int = 0
    problems: list[str] = field(default_factory=list)
    first: dict[Sent, float] = field(default_factory=dict)
    final: dict[Sent, float] = field(default_factory=dict)

    @classmethod
    def of(cls, sent: list[Sent], answers: Answers) -> Check:
        check = cls(expected=len(sent))
        by_reply: dict[tuple[int, int | None], list[Answer]] = defaultdict(list)
        for chat, chat_answers in answers.items():
            for answer in chat_answers:
                if not answer.deleted:
                    by_reply[(chat, answer.reply_to)].append(answer)
        for message in sent:
            found = by_reply.pop((message.chat, message.message_id), [])
            if len(found) == 1 and f"{message.tag}:" in found[0].text:
                check.once += 1
                check.first[message], check.final[message] = found[0].first, found[0].final
            elif len(check.problems) < 5:
                check.problems.append(f"{message.tag}: {[a.text[:60] for a in found]}")
        for (chat, _), extra in by_reply.items():
            check.problems.append(f"unexpected answer in chat {chat}: {extra[0].text[:60]}")
        return check

    def line(self) -> str:
        return f"{self.once}/{self.expected}"


def _inject(fake: FakeTelegram, injected: list[Sent], messages: list[tuple[int, str, str]]) -> list[Sent]:
    out = []
    for chat, tag, text in messages:
        at = time.monotonic()  # stamped just before the update is queued (and long polls woken)
        update = fake.private_message(chat, f"{tag}: {text}", first_name=f"User {chat}")
        out.append(Sent(chat, update["message"]["message_id"], tag, at))
    injected.extend(out)
    return out


def _inject_file(
    fake: FakeTelegram, injected: list[Sent], chat: int, tag: str, data: bytes, name: str, mime_type: str
) -> Sent:
    at = time.monotonic()
    update = fake.private_message(
        chat, f"{tag}: what is it?", first_name=f"User {chat}", document=data, file_name=name,
        mime_type=mime_type,
    )  # fmt: skip
    sent = Sent(chat, update["message"]["message_id"], tag, at)
    injected.append(sent)
    return sent


def _say(fake: FakeTelegram, injected: list[Sent], chat: int, text: str) -> None:
    """A direct message of ``text`` as it is (a command, say): not tagged, not checked."""
    fake.private_message(chat, text, first_name=f"User {chat}")


def _inject_quietly(fake: FakeTelegram, injected: list[Sent], messages: list[tuple[int, str, str]]) -> int:
    return len(_inject(fake, injected, messages))


def _check(fake: FakeTelegram, injected: list[Sent], chats: list[int]) -> tuple[int, int, list[str]]:
    wanted = set(chats)
    check = Check.of([m for m in injected if m.chat in wanted], _answers(fake, injected, chats)[0])
    return check.once, check.expected, check.problems


def _answers(fake: FakeTelegram, injected: list[Sent], chats: list[int]) -> tuple[Answers, Typing]:
    """Every bot message of ``chats`` with its call times, and each chat's typing indicators."""
    sends: dict[tuple[int, int | None], list[float]] = defaultdict(list)
    edits: dict[tuple[int, int], list[float]] = defaultdict(list)
    typing: Typing = defaultdict(list)
    for call in fake.calls:
        if not call.ok:
            continue
        if call.method == "sendMessage":
            reply = (call.params.get("reply_parameters") or {}).get("message_id")
            sends[(int(call.params["chat_id"]), reply)].append(call.time)
        elif call.method == "editMessageText":
            edits[(int(call.params["chat_id"]), int(call.params["message_id"]))].append(call.time)
        elif call.method == "sendChatAction":
            typing[int(call.params["chat_id"])].append(call.time)
    answers: Answers = {}
    for chat in chats:
        answers[chat] = []
        for message in fake.messages(chat):
            created = sends[(chat, message.reply_to_message_id)]
            times = created + edits[(chat, message.message_id)]
            answers[chat].append(
                Answer(
                    message.message_id,
                    message.reply_to_message_id,
                    message.text,
                    message.deleted,
                    min(created, default=min(times, default=0.0)),
                    max(times, default=0.0),
                )
            )
    return answers, {chat: typing[chat] for chat in chats}


def _polls(fake: FakeTelegram, injected: list[Sent], since: float) -> tuple[list[float], list[float]]:
    """When each ``getUpdates`` after ``since`` arrived, and when one arrived while another waited."""
    polls = [call.time for call in fake.calls_to("getUpdates") if call.time > since]
    return polls, [at for at in fake.poll_overlaps if at > since]


COMMANDS: dict[str, Callable[..., Any]] = {
    "polls": _polls,
    "inject": _inject,
    "inject_quietly": _inject_quietly,
    "inject_file": _inject_file,
    "say": _say,
    "answers": _answers,
    "check": _check,
    "rss": lambda fake, injected: rss_kb(),
}


def serve(address: str, port: int, authkey: str) -> None:
    """The child process: serve a FakeTelegram from a thread, run the parent's commands."""
    fake = FakeTelegram()
    injected: list[Sent] = []  # every message injected, kept here rather than in the measured process
    commands = {
        name: (lambda fake, *args, command=command: command(fake, injected, *args))
        for name, command in COMMANDS.items()
    }
    with fake.serve_in_thread() as base_url:
        PlatformProcess.child(address, port, authkey, fake, (base_url, fake.token), commands)


class FakeTelegramProcess(PlatformProcess):
    """``with FakeTelegramProcess() as fake``: ``fake.base_url``/``fake.token`` for the gateway,
    ``await fake.inject(...)`` to write to the bot, ``await fake.answers(chats)`` to see its replies."""

    module = "benchmarks.fake_telegram"

    @property
    def base_url(self) -> str:
        return self.hello[0]

    @property
    def token(self) -> str:
        return self.hello[1]

    async def inject_quietly(self, messages: list[tuple[int, str, str]]) -> int:
        """:meth:`inject` that keeps the records in the fake's process; returns how many."""
        count: int = await asyncio.to_thread(self._request, "inject_quietly", messages)
        return count

    async def inject_file(self, chat: int, tag: str, data: bytes, *, name: str, mime_type: str) -> Sent:
        """A direct message from ``chat`` with a file sent as a file, captioned ``"<tag>: what is it?"``."""
        sent: Sent = await asyncio.to_thread(self._request, "inject_file", chat, tag, data, name, mime_type)
        return sent

    async def say(self, chat: int, text: str) -> None:
        """A direct message of ``text`` from ``chat`` as it is (a command), not tagged and not checked."""
        await asyncio.to_thread(self._request, "say", chat, text)

    async def check(self, chats: list[int]) -> tuple[int, int, list[str]]:
        """(answered exactly once, injected, problems) over every message injected into ``chats``."""
        result: tuple[int, int, list[str]] = await asyncio.to_thread(self._request, "check", chats)
        return result

    async def answers(self, chats: list[int]) -> tuple[Answers, Typing]:
        found: tuple[Answers, Typing] = await asyncio.to_thread(self._request, "answers", chats)
        return found

    async def polls(self, since: float) -> tuple[list[float], list[float]]:
        """(every ``getUpdates`` arrival after ``since``, every overlap of two after it): fake's clock."""
        found: tuple[list[float], list[float]] = await asyncio.to_thread(self._request, "polls", since)
        return found

    async def rss_kb(self) -> int:
        value: int = await asyncio.to_thread(self._request, "rss")
        return value
