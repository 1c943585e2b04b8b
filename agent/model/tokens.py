"""The token estimate: a rough size of messages (~4 characters per token, files by pixels and pages).

Used where no provider reported a count (a cancelled call, a message not yet sent) and to compare and
split histories (compression); never billed as such.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.model.messages import Message

CHARS_PER_TOKEN = 4  # the rough estimate the providers' own docs suggest
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(message: Message) -> int:
    """Rough size of a message (~4 characters per token): used only to compare and to split."""
    chars = len(message.content) + sum(len(c.name) + len(c.arguments_json) for c in message.tool_calls)
    files = sum(media.tokens for media in message.media)  # counted by pixels and pages, not bytes
    return chars // CHARS_PER_TOKEN + files + MESSAGE_OVERHEAD_TOKENS


def estimate_total(messages: Sequence[Message]) -> int:
    return sum(estimate_tokens(m) for m in messages)
