"""What a client's messages say as a conversation, and the digest that finds it again (pure).

An OpenAI client sends the whole conversation with every request. Herald keeps a conversation as a
session whose prompt and history are stored and re-sent byte for byte, so it must recognise, in each
request, the history it already holds:

- the leading system (or developer) messages are the client's *instructions*, kept in the session's
  prompt (its context layer) when the session starts; a changed one is another conversation;
- the rest is a list of :class:`Turn` (user and assistant in turn): texts stripped, empty messages
  dropped, consecutive messages of one role joined, so that a client re-sending the conversation with
  other whitespace or split messages is still recognised;
- the last turn is the person's new message; everything before it is the *history*, and
  :func:`digest` of the instructions and the history is what a stored conversation is found by
  (``gateway.openai_api.conversations``): after each answer the session records the digest of the
  history the client now holds, so the next request of that history continues it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Role = Literal["user", "assistant"]
DIGEST_VERSION = "v1"


@dataclass(frozen=True)
class Turn:
    role: Role
    text: str


@dataclass(frozen=True)
class Transcript:
    """A request's conversation: instructions, the history before the new message, the new message."""

    instructions: str
    history: tuple[Turn, ...]
    message: str

    @property
    def prefix_digest(self) -> str:
        """The digest of what the client held before this message (what a stored session must be at)."""
        return digest(self.instructions, self.history)

    def answered(self, answer: str) -> str:
        """The digest of what the client holds once it has ``answer``."""
        return digest(
            self.instructions, joined([*self.history, Turn("user", self.message), Turn("assistant", answer)])
        )


def joined(turns: Sequence[Turn]) -> tuple[Turn, ...]:
    """``turns`` with texts stripped, empty ones dropped and neighbours of one role joined by a blank line."""
    out: list[Turn] = []
    for turn in turns:
        text = turn.text.strip()
        if not text:
            continue
        if out and out[-1].role == turn.role:
            out[-1] = Turn(turn.role, f"{out[-1].text}\n\n{text}")
        else:
            out.append(Turn(turn.role, text))
    return tuple(out)


def digest(instructions: str, history: Sequence[Turn]) -> str:
    """SHA-256 of the instructions and the history, over a canonical JSON form (hex)."""
    canonical = json.dumps(
        [DIGEST_VERSION, instructions.strip(), [[turn.role, turn.text] for turn in history]],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class NotAConversation(ValueError):
    """The messages do not make a conversation Herald can answer; the message says why, in one sentence."""


def transcript(instructions: Sequence[str], turns: Sequence[Turn]) -> Transcript:
    """The conversation of a request: its instructions (the leading system messages, in order) and its
    turns. Raises :class:`NotAConversation` when nothing is left to answer or the history does not start
    with the person."""
    clean = joined(turns)
    if not clean or clean[-1].role != "user":
        raise NotAConversation(
            "The last message must be the person's (role user) with some text: it is what Herald answers."
        )
    if clean[0].role != "user":
        raise NotAConversation(
            "The conversation must start with a user message (after the system messages); an assistant "
            "message before any user message cannot be kept."
        )
    text = "\n\n".join(part.strip() for part in instructions if part.strip())
    return Transcript(text, clean[:-1], clean[-1].text)
