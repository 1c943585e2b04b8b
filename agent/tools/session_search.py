"""The ``session_search`` tool: full-text search over every past conversation, compressed parts too."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.tools.registry import Tool, ToolContext, ToolError

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words to look for (all must match)."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 25,
            "description": "Maximum results (default 8).",
        },
    },
    "required": ["query"],
}


async def handle(args: dict[str, Any], context: ToolContext) -> str:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("'query' must be a non-empty string.")
    limit = args.get("limit", 8)
    limit = max(1, min(25, limit if isinstance(limit, int) else 8))
    hits = await context.store.messages.search(
        query, limit=limit, session_key=context.session_key, current_session=context.session_id
    )
    if not hits:
        return f"No past messages match '{query}'."
    lines = [f"{len(hits)} result(s) for '{query}':"]
    for hit in hits:
        day = dt.datetime.fromtimestamp(hit.created_at, tz=dt.UTC).strftime("%Y-%m-%d")
        title = hit.session_title or "untitled session"
        here = " (this session)" if hit.session_id == context.session_id else ""
        compacted = "" if hit.active else " (compressed away)"
        lines.append(f"- {day} · {title}{here} · {hit.role}{compacted}: {hit.snippet}")
    return "\n".join(lines)


SESSION_SEARCH_TOOL = Tool(
    name="session_search",
    description=(
        "Search the text of past conversations in this chat (earlier sessions and compressed-away "
        "messages included) and return matching snippets with dates."
    ),
    input_schema=SCHEMA,
    handler=handle,
    guidance=(
        "session_search: when the user refers to something discussed before, search past sessions first."
    ),
    toolset="session_search",
)
