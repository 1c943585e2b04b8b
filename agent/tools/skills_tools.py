"""``skills_list`` and ``skill_view``: progressive disclosure of skills.

The system prompt carries only the index; a skill's body enters the conversation as a tool result,
appended like any other message, so activating a skill never rebuilds the prompt.
"""

from __future__ import annotations

from typing import Any

from agent.skills import SkillError
from agent.tools.registry import Tool, ToolContext, ToolError


async def list_skills(args: dict[str, Any], context: ToolContext) -> str:
    return await context.skills.index_text() or "No skills are installed."


async def view_skill(args: dict[str, Any], context: ToolContext) -> str:
    name = args.get("name")
    path = args.get("path")
    if not isinstance(name, str) or not name:
        raise ToolError("'name' is required: the skill's name from the skills index.")
    if path is not None and not isinstance(path, str):
        raise ToolError("'path' must be a string: a file path relative to the skill's folder.")
    try:
        return await context.skills.read(name, path)
    except SkillError as exc:
        raise ToolError(str(exc)) from exc


SKILLS_LIST_TOOL = Tool(
    name="skills_list",
    description="List the installed skills (name, category, description).",
    input_schema={"type": "object", "properties": {}},
    handler=list_skills,
    guidance="",
    toolset="skills",
)

SKILL_VIEW_TOOL = Tool(
    name="skill_view",
    description=(
        "Load a skill's instructions (SKILL.md) by name, or one of its other files with 'path' "
        "(relative to the skill's folder)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "path": {
                "type": "string",
                "description": "Optional file inside the skill, e.g. 'templates/a.md'.",
            },
        },
        "required": ["name"],
    },
    handler=view_skill,
    guidance="skill_view: when a task matches a skill in the index, load it before starting.",
    toolset="skills",
)
