"""The default tool registry."""

from __future__ import annotations

from agent.tools.delegate import DELEGATE_TOOL
from agent.tools.memory_tool import MEMORY_TOOL
from agent.tools.registry import ToolRegistry
from agent.tools.session_search import SESSION_SEARCH_TOOL
from agent.tools.skills_tools import SKILL_VIEW_TOOL, SKILLS_LIST_TOOL
from agent.tools.todo import TODO_TOOL


def builtin_registry() -> ToolRegistry:
    return ToolRegistry(
        [DELEGATE_TOOL, MEMORY_TOOL, SESSION_SEARCH_TOOL, SKILLS_LIST_TOOL, SKILL_VIEW_TOOL, TODO_TOOL]
    )
