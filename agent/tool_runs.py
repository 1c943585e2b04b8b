"""Running one model response's tool calls: concurrently, results in the calls' order, stored as sent.

Shared by the turn loop (``agent.loop``) and side tasks (``agent.side``), so both refuse, report and
serialise tool calls the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from agent.model.messages import Message, ToolCall
from agent.model.provider import Provider
from agent.tools.registry import ToolContext, ToolRegistry, run_tool

Notify = Callable[[ToolCall, Message | None], None]  # called at a call's start (None) and end (result)


def with_payload(provider: Provider, message: Message) -> Message:
    """Attach the wire fragment ``message`` is sent as, so it is stored exactly as sent."""
    return replace(message, payload=provider.wire_message(message), payload_api=provider.api)


async def run_tool_calls(
    registry: ToolRegistry,
    provider: Provider,
    calls: tuple[ToolCall, ...],
    context: ToolContext,
    *,
    advertised: set[str],
    notify: Notify | None = None,
) -> list[Message]:
    """Run ``calls`` concurrently; each result carries its wire payload. Never raises for a tool.
    ``context.gate`` is asked before each call runs."""

    async def run(call: ToolCall) -> Message:
        if notify is not None:
            notify(call, None)
        result = await run_tool(registry, call, context, advertised)
        if notify is not None:
            notify(call, result)
        return with_payload(provider, result)

    return list(await asyncio.gather(*(run(call) for call in calls)))
