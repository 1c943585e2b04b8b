"""The web tools for tests: built with settings (and a fake web server that counts as public), called
through the registry's ``run_tool`` path with an owner's or a guest's ToolContext."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from agent.memory import OWNER_SCOPE
from agent.model.messages import Message, ToolCall
from agent.paid import ServiceCall
from agent.settings import WebSettings
from agent.tools.registry import ToolContext, ToolRegistry, run_tool
from agent.tools.web.addresses import guest_policy, owner_policy
from agent.tools.web.tools import WebTools
from tests.fakes.web import FakeWeb
from tests.helpers import open_store
from tests.state_support import files_bank, files_library

Contexts = Callable[[bool], ToolContext]  # trusted (the owner) or not (a guest) -> a context
T = TypeVar("T")


class _Uncharged:
    """Sends a paid call as it is: these tests are about what the tools do; what a search costs and who
    pays it is tests/money/test_paid_services.py's business (through the real ``ModelCalls.pay``)."""

    async def pay(self, call: ServiceCall[T], *, session_id: str, timeout: float) -> T:  # noqa: ASYNC109
        return await call.send()


UNCHARGED = _Uncharged()


@asynccontextmanager
async def tool_contexts(root: Path) -> AsyncIterator[Contexts]:
    """Contexts over a real session store and memory under ``root``."""
    async with open_store(root / "state.db") as store:
        memory = files_bank(root / "memories", 2000, 1000).store(OWNER_SCOPE)
        skills = files_library(root / "skills")

        def context(trusted: bool) -> ToolContext:
            return ToolContext("session", "telegram:1", store, memory, skills, UNCHARGED, trusted=trusted)

        yield context


@asynccontextmanager
async def web_tools(
    fake: FakeWeb | None = None, environ: Mapping[str, str] | None = None, **settings: Any
) -> AsyncIterator[WebTools]:
    """The web tools with ``settings`` (the ``web`` config section); with ``fake``, its server counts as
    public and every other address keeps the real policy."""
    config = WebSettings.model_validate(settings)
    guest, owner = guest_policy(config.allow_private), owner_policy(config.allow_private)
    if fake is not None:
        tools = WebTools(config, environ or {}, guest=fake.as_public(guest), owner=fake.as_public(owner))
    else:
        tools = WebTools(config, environ or {})
    try:
        yield tools
    finally:
        await tools.aclose()


async def call(tools: WebTools, context: ToolContext, name: str, **args: Any) -> Message:
    """One tool call as the agent loop makes it."""
    registry = ToolRegistry(tools.tools)
    allowed = {tool.name for tool in tools.tools}
    return await run_tool(registry, ToolCall("call-1", name, json.dumps(args)), context, allowed)
