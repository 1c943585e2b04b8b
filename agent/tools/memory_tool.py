"""The ``memory`` tool: curated notes in MEMORY.md and USER.md of the session's memory scope.

Writes are stored at once (in files or in the database: ``agent.memory``), but the running session's
prompt keeps its frozen snapshot (changing it would invalidate the session's cache); the next session
sees the new text. The tool only ever reaches the memory of its session's scope (``ToolContext.memory``):
in a group chat, the group's own.
"""

from __future__ import annotations

from typing import Any

from agent.memory import MemoryToolError
from agent.tools.registry import Tool, ToolContext, ToolError

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "replace", "remove", "read"]},
        "target": {
            "type": "string",
            "enum": ["memory", "user"],
            "description": "memory = your own notes (MEMORY.md); user = facts about the person (in a group: "
            "the people) you talk with (USER.md)",
        },
        "content": {"type": "string", "description": "The entry to add, or the replacement entry."},
        "old_text": {"type": "string", "description": "For replace/remove: text identifying one entry."},
    },
    "required": ["action", "target"],
}


def _required(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"'{key}' is required for action '{args.get('action')}'.")
    return value


async def handle(args: dict[str, Any], context: ToolContext) -> str:
    action, target = args.get("action"), args.get("target")
    if target not in ("memory", "user"):
        raise ToolError("'target' must be 'memory' or 'user'.")
    memory = context.memory
    try:
        if action == "read":
            text = await memory.read(target)
            return text or f"({'MEMORY.md' if target == 'memory' else 'USER.md'} is empty)"
        if action == "add":
            return await memory.add(target, _required(args, "content"))
        if action == "replace":
            old, new = _required(args, "old_text"), _required(args, "content")
            return await memory.replace(target, old, new)
        if action == "remove":
            return await memory.remove(target, _required(args, "old_text"))
    except MemoryToolError as exc:
        raise ToolError(str(exc)) from exc
    raise ToolError("'action' must be one of add, replace, remove, read.")


MEMORY_TOOL = Tool(
    name="memory",
    description=(
        "Read or edit your persistent memory: MEMORY.md (your notes: environment facts, conventions, "
        "lessons) and USER.md (the user's preferences and details). Entries are short and durable. "
        "Changes are saved at once and appear in your system prompt from the next conversation."
    ),
    input_schema=SCHEMA,
    handler=handle,
    guidance=(
        "memory: save durable facts worth knowing in future conversations (user preferences, "
        "environment details, corrections); not task progress. Keep entries short; replace outdated ones."
    ),
    toolset="memory",
)
