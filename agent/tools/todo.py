"""The ``todo`` tool: a per-session task list, stored with the session so it survives restarts."""

from __future__ import annotations

from typing import Any

from agent.tools.registry import Tool, ToolContext, ToolError

STATUSES = ("pending", "in_progress", "completed", "cancelled")
MAX_ITEMS = 50

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "Items to write. Omit to read the current list.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "content": {"type": "string"},
                    "status": {"type": "string", "enum": list(STATUSES)},
                },
                "required": ["id", "content", "status"],
            },
        },
        "merge": {
            "type": "boolean",
            "description": "true: update/add items by id; false (default): replace the whole list.",
        },
    },
}


def _validate(items: object) -> list[dict[str, str]]:
    if not isinstance(items, list):
        raise ToolError("'todos' must be a list of {id, content, status}.")
    clean: list[dict[str, str]] = []
    for position, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise ToolError(f"Item {position} must be an object with id, content and status.")
        ident, content, status = item.get("id"), item.get("content"), item.get("status")
        if not isinstance(ident, str) or not ident or not isinstance(content, str):
            raise ToolError(f"Item {position} needs a non-empty string 'id' and a string 'content'.")
        if status not in STATUSES:
            raise ToolError(f"Item {position} has status {status!r}; use one of {', '.join(STATUSES)}.")
        clean.append({"id": ident, "content": content, "status": status})
    return clean


def merge_todos(current: list[dict[str, Any]], updates: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Update items by id, append new ones, keep order of first appearance."""
    merged = [dict(item) for item in current]
    index = {item["id"]: position for position, item in enumerate(merged)}
    for update in updates:
        if update["id"] in index:
            merged[index[update["id"]]] = dict(update)
        else:
            index[update["id"]] = len(merged)
            merged.append(dict(update))
    return merged


def format_todos(items: list[dict[str, Any]]) -> str:
    if not items:
        return "The todo list is empty."
    marks = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "cancelled": "[-]"}
    done = sum(1 for item in items if item["status"] == "completed")
    lines = [f"{done}/{len(items)} done"]
    lines += [f"{marks[item['status']]} {item['id']}. {item['content']}" for item in items]
    return "\n".join(lines)


async def handle(args: dict[str, Any], context: ToolContext) -> str:
    current = await context.store.sessions.todos(context.session_id)
    if args.get("todos") is None:
        return format_todos(current)
    updates = _validate(args["todos"])
    items = merge_todos(current, updates) if args.get("merge") else updates
    if len(items) > MAX_ITEMS:
        raise ToolError(f"A todo list holds at most {MAX_ITEMS} items; remove finished ones first.")
    await context.store.sessions.set_todos(context.session_id, items)
    return format_todos(items)


TODO_TOOL = Tool(
    name="todo",
    description="Keep a task list for this conversation: write items with status, or read the list.",
    input_schema=SCHEMA,
    handler=handle,
    guidance="todo: for work with 3 or more steps, write a todo list first and keep statuses current.",
    toolset="todo",
)
