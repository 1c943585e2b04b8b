"""The fake Discord (``tests.fakes.FakeDiscord``: REST and the gateway websocket) in a process of its
own, for benchmarks: the method of ``benchmarks/fake_telegram.py`` (one clock for injection and the
call log; the fake's records outside the measured process). A chat is a user id: they write in their
DM channel with the bot."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.fake_telegram import Answer, Answers, Sent, Typing
from benchmarks.platform_process import PlatformProcess
from tests.fakes import FakeDiscord


def _inject(fake: FakeDiscord, messages: list[tuple[int, str, str]]) -> list[Sent]:
    out = []
    for chat, tag, text in messages:
        at = time.monotonic()  # stamped just before the event is dispatched
        payload = fake.dm_message(chat, f"{tag}: {text}", username=f"user{chat}")
        out.append(Sent(chat, int(payload["id"]), tag, at))
    return out


def _answers(fake: FakeDiscord, chats: list[int]) -> tuple[Answers, Typing]:
    """Every bot message of ``chats``: the POST that created it and the last PATCH that edited it."""
    created: dict[int, float] = {}
    edited: dict[int, float] = defaultdict(float)
    for call in fake.calls_to("POST /channels/{channel_id}/messages"):
        if call.status == 200 and isinstance(call.response, dict):
            created[int(call.response["id"])] = call.time
    for call in fake.calls_to("PATCH /channels/{channel_id}/messages/{message_id}"):
        if call.status == 200:
            target = int(call.path.rsplit("/", 1)[-1])
            edited[target] = max(edited[target], call.time)
    answers: Answers = {}
    for chat in chats:
        answers[chat] = []
        for message in fake.messages(fake.dm_channel(chat)):
            if message.author_id != fake.bot_id or message.message_id not in created:
                continue
            reference = (message.message_reference or {}).get("message_id")
            first = created[message.message_id]
            answers[chat].append(
                Answer(
                    message.message_id,
                    int(reference) if reference else None,
                    message.content,
                    message.deleted,
                    first,
                    max(first, edited[message.message_id]),
                )
            )
    return answers, {chat: [] for chat in chats}


COMMANDS: dict[str, Callable[..., Any]] = {"inject": _inject, "answers": _answers}


def serve(address: str, port: int, authkey: str) -> None:
    """The child process: serve a FakeDiscord from a thread, run the parent's commands."""
    fake = FakeDiscord()
    with fake.serve_in_thread() as urls:
        PlatformProcess.child(address, port, authkey, fake, (urls.rest, urls.gateway, fake.token), COMMANDS)


class FakeDiscordProcess(PlatformProcess):
    """``with FakeDiscordProcess() as fake``: the gateway's ``discord`` section and token from
    :meth:`section` and :meth:`environ`, ``await fake.inject(...)``, ``await fake.answers(chats)``."""

    module = "benchmarks.fake_discord"

    def section(self, chats: list[int]) -> dict[str, Any]:
        rest, gateway, _ = self.hello
        return {"api_base": rest, "gateway_url": gateway, "allowed_users": [str(chat) for chat in chats]}

    def environ(self) -> dict[str, str]:
        return {"DISCORD_BOT_TOKEN": self.hello[2]}
