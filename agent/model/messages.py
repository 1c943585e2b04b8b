"""Provider-neutral conversation types.

The agent stores and reasons about messages in this shape; each provider converts them to its wire
format deterministically (see ``agent.providers``). Every message also keeps the exact wire fragment
it was sent as, so a replay after a restart sends the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.model.media import Media

Role = Literal["user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A tool invocation requested by the model.

    ``arguments_json`` is kept exactly as the model produced it so the assistant message can be
    re-sent byte for byte; ``arguments`` is the parsed form handlers receive.
    """

    id: str
    name: str
    arguments_json: str

    @property
    def arguments(self) -> dict[str, Any]:
        try:
            value = json.loads(self.arguments_json or "{}")
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Message:
    """One message of a session's history.

    ``payload``/``payload_api`` hold the provider wire fragment this message was sent as (for a tool
    result on Anthropic: the ``tool_result`` block). ``None`` until the message was first sent.
    ``media`` are the images and documents a user message carries (stored once each, by content hash;
    the payload holds placeholders for their bytes: ``agent.model.wire``).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    payload: dict[str, Any] | None = None
    payload_api: str | None = None
    id: int | None = None
    position: float = 0.0  # order within the session; compression inserts between positions
    active: bool = True
    created_at: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    media: tuple[Media, ...] = ()


def tool_result(
    call: ToolCall, text: str, *, is_error: bool = False, media: tuple[Media, ...] = ()
) -> Message:
    return Message(
        role="tool", content=text, tool_call_id=call.id, tool_name=call.name, is_error=is_error, media=media
    )
