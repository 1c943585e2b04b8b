"""The ``delegate`` tool: hand independent pieces of work to sub-agents that run at once.

Each sub-agent starts from this session's own prompt and tool list (so it reads them from the cache)
with its task as its first message, works with the tools it is allowed, and returns only its final
answer, which comes back here with what it cost. Limits (how many, how deep, how long, how many
tokens) are the ``delegate`` section of the configuration.
"""

from __future__ import annotations

import re
from typing import Any

from agent.tools.registry import SideOutcome, Tool, ToolContext, ToolError

MAX_TASK_CHARS = 20_000
ADDRESS = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tasks": {
            "type": "array",
            "items": {"type": "string"},
            "description": "One self-contained instruction per sub-agent, with everything it needs to know.",
        }
    },
    "required": ["tasks"],
}


def format_outcomes(outcomes: list[SideOutcome]) -> str:
    blocks = []
    for number, outcome in enumerate(outcomes, start=1):
        cost = (
            f"{outcome.input_tokens:,} tokens in ({outcome.cache_read_tokens:,} from cache), "
            f"{outcome.output_tokens:,} out"
        )
        status = f"ended early: {without_addresses(outcome.error)}" if outcome.error else "done"
        blocks.append(f"## Sub-agent {number} ({status}; {cost})\n\n{outcome.text.strip() or '(no answer)'}")
    return "\n\n".join(blocks)


def without_addresses(error: str) -> str:
    """A sub-agent's failure as the person would read it, without the addresses it may name (a
    provider's endpoint in a configuration hint): Herald's own, not the model's business."""
    return ADDRESS.sub("(address not shown)", error)


async def handle(args: dict[str, Any], context: ToolContext) -> str:
    if context.delegate is None:
        raise ToolError("Delegation is not available here (sub-agents may not delegate further).")
    tasks = args.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise ToolError("'tasks' must be a non-empty list of non-empty strings, one per sub-agent.")
    if any(len(task) > MAX_TASK_CHARS for task in tasks):
        raise ToolError(f"Each task must be under {MAX_TASK_CHARS:,} characters; summarise what it needs.")
    try:
        outcomes = await context.delegate(tasks)
    except ValueError as exc:  # more tasks than allowed
        raise ToolError(str(exc)) from exc
    return format_outcomes(outcomes)


DELEGATE_TOOL = Tool(
    name="delegate",
    description=(
        "Run sub-agents on independent tasks at the same time and get each one's final answer. Each "
        "sub-agent has your instructions and tools but not this conversation: write each task so it "
        "stands on its own."
    ),
    input_schema=SCHEMA,
    handler=handle,
    guidance=(
        "delegate: for several independent pieces of work (research, drafts, checks), delegate them in "
        "one call instead of doing them one after another; give each task all the context it needs."
    ),
    toolset="delegate",
)
