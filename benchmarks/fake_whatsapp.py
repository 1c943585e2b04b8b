"""The fake WhatsApp Cloud API (``tests.fakes.whatsapp.FakeWhatsApp``: the Graph API and Meta's signed
webhook POSTs) in a process of its own, for benchmarks: the method of ``benchmarks/fake_telegram.py``
(one clock for injection and the fake's records; those records outside the measured process). A chat
is a number: person ``49<n>`` writes to the business number, and the message reaches the gateway as a
webhook POST to the port the parent chose for the gateway's HTTP server.

A WhatsApp answer in a direct chat carries no reference to the message it answers: it is matched to the
injected message whose tag it quotes (``c<chat>m<n>:``, echoed by the emulator), as for Slack. WhatsApp
cannot edit a message, so an answer's first and final times are the same send.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from typing import Any, Self

from benchmarks.fake_telegram import Answer, Answers, Sent, Typing
from benchmarks.platform_process import PlatformProcess
from tests.fakes.whatsapp import APP_SECRET, NUMBER_ID, TOKEN, VERIFY_TOKEN, FakeWhatsApp

_TAG = re.compile(r"\b(c\d+m\d+):")
WEBHOOK_PATH = "/whatsapp/webhook"


def person(chat: int) -> str:
    return f"49{chat}"


def _inject(fake: FakeWhatsApp, tags: dict[str, int], messages: list[tuple[int, str, str]]) -> list[Sent]:
    out = []
    for chat, tag, text in messages:
        at = time.monotonic()  # stamped just before the webhook is queued for its POST
        message_id = fake.text(person(chat), f"{tag}: {text}")
        tags[tag] = int(message_id.rsplit(".", 1)[1])
        out.append(Sent(chat, tags[tag], tag, at))
    return out


def _answers(fake: FakeWhatsApp, tags: dict[str, int], chats: list[int]) -> tuple[Answers, Typing]:
    answers: Answers = {}
    for chat in chats:
        answers[chat] = []
        for message in fake.bot_messages(person(chat)):
            quoted = _TAG.search(message.text)
            number = int(message.id.rsplit(".", 1)[1])
            answers[chat].append(Answer(number, tags.get(quoted.group(1)) if quoted else None, message.text,
                                        False, message.made, message.made))  # fmt: skip
    return answers, {chat: [] for chat in chats}


def _webhooks_to(fake: FakeWhatsApp, tags: dict[str, int], url: str) -> None:
    fake.webhooks_to(url)


COMMANDS: dict[str, Callable[..., Any]] = {
    "inject": _inject,
    "answers": _answers,
    "webhooks_to": _webhooks_to,
}


def serve(address: str, port: int, authkey: str) -> None:
    """The child process: serve a FakeWhatsApp from a thread, run the parent's commands."""
    fake = FakeWhatsApp()
    tags: dict[str, int] = {}  # each injected tag's message number, kept in this process
    commands = {
        name: (lambda fake, *args, command=command: command(fake, tags, *args))
        for name, command in COMMANDS.items()
    }
    with fake.serve_in_thread() as api:
        PlatformProcess.child(address, port, authkey, fake, (api,), commands)


class FakeWhatsAppProcess(PlatformProcess):
    """``with FakeWhatsAppProcess() as fake``: the fake Cloud API for the gateway's ``whatsapp`` section;
    its webhooks go to the gateway's HTTP server on a port chosen here (:meth:`gateway_section`)."""

    module = "benchmarks.fake_whatsapp"

    def __enter__(self) -> Self:
        super().__enter__()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._request("webhooks_to", f"http://127.0.0.1:{self.port}{WEBHOOK_PATH}")
        return self

    def gateway_section(self) -> dict[str, Any]:
        return {"http_host": "127.0.0.1", "http_port": self.port}

    def section(self, chats: list[int]) -> dict[str, Any]:
        return {"api_base": self.hello[0], "phone_number_id": NUMBER_ID,
                "allowed_numbers": [person(chat) for chat in chats]}  # fmt: skip

    def environ(self) -> dict[str, str]:
        return {"WHATSAPP_ACCESS_TOKEN": TOKEN, "WHATSAPP_APP_SECRET": APP_SECRET,
                "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN}  # fmt: skip
