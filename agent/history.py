"""The shape of a conversation's history: where a turn starts, and a turn that was never answered.

A turn is one real user message and what the agent stored for it: assistant messages calling tools,
their results, and a final answer (an assistant message without tool calls). Some user-role messages
are not turn starts: a compression summary, the note that stands in for dropped turns, and the
request to continue an answer cut off by ``max_tokens``. A process killed mid-turn leaves a turn
without its final answer; :func:`unanswered_turn` finds it so the agent can close it the way it
closes a failed turn (taken out of the conversation, kept in the database).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.model.messages import Message

# meta keys of user-role messages that Herald wrote itself (compression, continuation)
SUMMARY_MARK = "summary"
DROPPED_MARK = "dropped_note"
CONTINUATION_MARK = "continuation"
SYNTHETIC_MARKS = (SUMMARY_MARK, DROPPED_MARK, CONTINUATION_MARK)
# meta key of a message a client's history brought (Agent.import_history): said, but never answered here
IMPORTED_MARK = "imported"
_REWRITTEN = (SUMMARY_MARK, DROPPED_MARK)


def is_turn_start(message: Message) -> bool:
    """A message the user sent (not one Herald wrote in the user's role)."""
    return message.role == "user" and not any(message.meta.get(mark) for mark in SYNTHETIC_MARKS)


def is_final_answer(message: Message) -> bool:
    return message.role == "assistant" and not message.tool_calls


def unanswered_turn(messages: Sequence[Message]) -> list[Message]:
    """The trailing messages of a turn that has no final answer; [] when the history is complete.

    The turn reaches back to its user message. If compression rewrote that message into a summary
    (the scan meets a summary first), nothing is returned: a summary is never taken out, and the
    agent does not compress in the middle of a continued answer, so this does not happen in practice.
    """
    if not messages or is_final_answer(messages[-1]):
        return []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if any(message.meta.get(mark) for mark in _REWRITTEN):
            return []
        if is_turn_start(message):
            return list(messages[index:])
    return []


def turn_marked(messages: Sequence[Message], meta: Mapping[str, Any]) -> list[Message] | None:
    """The messages of the turn whose user message carries every key of ``meta`` (from that message on),
    if the history has it."""
    for index, message in enumerate(messages):
        if message.role == "user" and all(message.meta.get(k) == v for k, v in meta.items()):
            return list(messages[index:])
    return None
