"""The fake Matrix homeserver (``tests.fakes.matrix.FakeMatrix``) in a process of its own, for benchmarks.

The same method as ``benchmarks/fake_telegram.py``: injection and the fake's call log share that
process's ``time.monotonic()``, so a latency is the difference of two readings of one clock, and the
fake's records are not counted in the gateway's process. A chat is a number: person ``@u<n>`` writes in
their direct room with the bot; event ids ``$event<k>`` are handed back as ``k``, so the results are
the :class:`~benchmarks.fake_telegram.Sent` and :class:`~benchmarks.fake_telegram.Answer` that
``benchmarks/gateway.py`` already checks and times.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.fake_telegram import Answer, Answers, Sent, Typing
from benchmarks.platform_process import PlatformProcess
from tests.fakes.matrix import BOT, SERVER, FakeMatrix


def user_of(chat: int) -> str:
    return f"@u{chat}:{SERVER}"


def number(event_id: str) -> int:
    return int(event_id.removeprefix("$event"))


def _inject(fake: FakeMatrix, messages: list[tuple[int, str, str]]) -> list[Sent]:
    out = []
    for chat, tag, text in messages:
        user = user_of(chat)
        fake.add_user(user, f"User {chat}")
        room = fake.direct_room(user)
        at = time.monotonic()  # stamped just before the event is appended (and syncs woken)
        event = fake.message(room, user, {"msgtype": "m.text", "body": f"{tag}: {text}"})
        out.append(Sent(chat, number(event["event_id"]), tag, at))
    return out


def _answers(fake: FakeMatrix, chats: list[int]) -> tuple[Answers, Typing]:
    """Every bot text message of ``chats``: the send that made it and the last edit that touched it."""
    answers: Answers = {}
    with fake.lock:
        for chat in chats:
            room = fake.direct_room(user_of(chat))
            made: dict[str, tuple[dict[str, Any], float]] = {}
            touched: dict[str, float] = defaultdict(float)
            for event in fake.rooms[room].events:
                if event["sender"] != BOT or event["type"] != "m.room.message":
                    continue
                at = fake.arrivals[event["event_id"]]
                relates = event["content"].get("m.relates_to") or {}
                if relates.get("rel_type") == "m.replace":
                    edited = relates["event_id"]
                    touched[edited] = max(touched[edited], at)
                    made[edited] = (event["content"]["m.new_content"], made[edited][1])
                elif event["content"].get("msgtype") == "m.text":
                    made[event["event_id"]] = (event["content"], at)
            answers[chat] = []
            for event_id, (content, first) in made.items():
                original = next(e for e in fake.rooms[room].events if e["event_id"] == event_id)
                relation = original["content"].get("m.relates_to") or {}
                reply = relation.get("m.in_reply_to", {}).get("event_id")
                answers[chat].append(
                    Answer(
                        number(event_id),
                        number(reply) if reply else None,
                        content["body"],
                        bool(original.get("redacted")),
                        first,
                        max(first, touched[event_id]),
                    )
                )
    return answers, {chat: [] for chat in chats}


COMMANDS: dict[str, Callable[..., Any]] = {"inject": _inject, "answers": _answers}


def serve(address: str, port: int, authkey: str) -> None:
    """The child process: serve a FakeMatrix from a thread, run the parent's commands."""
    fake = FakeMatrix()
    with fake.serve_in_thread() as url:
        PlatformProcess.child(address, port, authkey, fake, (url, fake.token), COMMANDS)


class FakeMatrixProcess(PlatformProcess):
    """``with FakeMatrixProcess() as fake``: the fake homeserver for the gateway's ``matrix`` section."""

    module = "benchmarks.fake_matrix"

    def section(self, chats: list[int]) -> dict[str, Any]:
        """The platform's config section: the fake's URLs, ``chats``' people allowed."""
        return {"homeserver": self.hello[0], "allowed_users": [user_of(chat) for chat in chats]}

    def environ(self) -> dict[str, str]:
        return {"MATRIX_ACCESS_TOKEN": self.hello[1]}
