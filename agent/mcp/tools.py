"""A server's tools as Herald tools: ``server__tool``, description and input schema as the server gave them.

Nothing is added, reordered or per chat: the same catalogue gives the same schema bytes (cache invariant
4), and the key order of an input schema is the server's. ``allow`` and ``deny`` filter by the server's
own tool names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import mcp_types as types

from agent.settings import McpServer
from agent.tools.mcp_names import tool_name
from agent.tools.registry import Handler, Tool, ToolContext, ToolError

TOOLSET = "mcp"


def offered(settings: McpServer, tools: Iterable[types.Tool]) -> list[types.Tool]:
    """The tools ``settings`` lets the agent use: those in ``allow`` (all when empty), none in ``deny``."""
    return [
        tool
        for tool in tools
        if (not settings.allow or tool.name in settings.allow) and tool.name not in settings.deny
    ]


def herald_tool(server: str, tool: types.Tool, handler: Handler) -> Tool:
    return Tool(
        name=tool_name(server, tool.name),
        description=tool.description or "",
        input_schema=tool.input_schema,
        handler=handler,
        guidance="",
        toolset=TOOLSET,
    )


def unavailable_tool(name: str, message: str) -> Tool:
    """What runs for a tool a session advertised that cannot be called now: ``message`` as its error."""

    async def refuse(arguments: dict[str, Any], context: ToolContext) -> str:
        raise ToolError(message)

    return Tool(
        name=name,
        description="",
        input_schema={"type": "object"},
        handler=refuse,
        guidance="",
        toolset=TOOLSET,
    )
