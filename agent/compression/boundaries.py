"""Pure functions deciding what compression keeps, prunes and replaces.

A compressed conversation is ``head + summary + tail``:

- head: the first exchange (first user message through the first answer), always kept verbatim, so
  the request prefix system + head still reads from cache after every compression;
- tail: the most recent messages, verbatim, starting at an assistant message so the summary (a user
  message) sits between two assistant messages and roles still alternate;
- middle: everything between, replaced by one summary.

Nothing here does I/O; every rule is unit-tested on plain message lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agent.model.messages import Message
from agent.model.tokens import estimate_tokens

PRUNED_TOOL_OUTPUT = "[Old tool output cleared to save context space]"
PRUNE_MIN_CHARS = 200
MISSING_RESULT = "[Result unavailable: removed during context compression]"
MAX_TAIL_MESSAGES = 100  # a tail of many tiny messages is capped too: hygiene's 400-message rule needs it


def head_end(messages: Sequence[Message]) -> int | None:
    """Index just past the first exchange: the first answer without tool calls. None if unanswered."""
    for index, message in enumerate(messages):
        if message.role == "assistant" and not message.tool_calls:
            return index + 1
    return None


def last_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return index
    return None


@dataclass(frozen=True)
class Boundaries:
    head_end: int  # messages[:head_end] is the head
    tail_start: int  # messages[tail_start:] is the tail; the middle is between


def choose_boundaries(
    messages: Sequence[Message], tail_budget_tokens: int, protect_last_n: int
) -> Boundaries | None:
    """Where head, middle and tail meet, or None when there is no middle to compress.

    The tail is as many recent messages as fit ``tail_budget_tokens``, but never fewer than
    ``protect_last_n`` nor (before alignment) more than ``MAX_TAIL_MESSAGES``. It then widens to the
    nearest assistant message at or before that point and at or before the last user message, so the
    last user message is always kept and a tool call is never separated from its results.
    """
    head = head_end(messages)
    last_user = last_user_index(messages)
    if head is None or last_user is None:
        return None
    start = len(messages)
    used = 0
    while start > head:
        cost = estimate_tokens(messages[start - 1])
        if used + cost > tail_budget_tokens:
            break
        used += cost
        start -= 1
    start = max(start, len(messages) - max(MAX_TAIL_MESSAGES, protect_last_n))
    start = min(start, len(messages) - protect_last_n, last_user)
    for index in range(start, head, -1):
        if messages[index].role == "assistant":
            return Boundaries(head_end=head, tail_start=index)
    return None


def prune_tool_outputs(messages: Sequence[Message], before: int) -> list[Message]:
    """Phase 1, no model call: replace long tool results before index ``before`` by a placeholder."""
    pruned = []
    for index, message in enumerate(messages):
        if (
            index < before
            and message.role == "tool"
            and (len(message.content) > PRUNE_MIN_CHARS or message.media)  # a screenshot costs its pixels
            and message.content != PRUNED_TOOL_OUTPUT
        ):
            message = replace(
                message, content=PRUNED_TOOL_OUTPUT, media=(), payload=None, payload_api=None, id=None
            )
        pruned.append(message)
    return pruned


def repair_tool_pairs(messages: Sequence[Message]) -> list[Message]:
    """Drop tool results whose call is gone; add a stub result for a call whose result is gone."""
    repaired: list[Message] = []
    open_calls: dict[str, Message] = {}  # call id -> the assistant message that made it
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id in open_calls:
                del open_calls[message.tool_call_id]
                repaired.append(message)
            continue  # an orphan result: its call was compressed away
        repaired.extend(_stubs(open_calls, position=message.position))
        open_calls = {call.id: message for call in message.tool_calls}
        repaired.append(message)
    repaired.extend(_stubs(open_calls, position=messages[-1].position if messages else 0.0))
    return repaired


def _stubs(open_calls: dict[str, Message], position: float) -> list[Message]:
    stubs = []
    for call_id, owner in open_calls.items():
        call = next(c for c in owner.tool_calls if c.id == call_id)
        stubs.append(
            Message(
                role="tool",
                content=MISSING_RESULT,
                tool_call_id=call.id,
                tool_name=call.name,
                position=position,
            )
        )
    open_calls.clear()
    return stubs


def summary_budget(compressed_tokens: int, context_length: int) -> int:
    """Summary length: 20% of what it replaces, at least 2,000, at most min(5% of window, 12,000)."""
    return min(max(compressed_tokens // 5, 2000), context_length // 20, 12_000)
