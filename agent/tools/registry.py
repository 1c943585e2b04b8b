"""Tool registry: each tool's schema, guidance and async handler are declared in one place.

The schema list a session sends is serialized once (``tools_json``), in name order with a fixed key
order, and stored with the session; handlers are looked up by name at call time.

Most tools are fixed when Herald starts; a :class:`ToolSource` adds tools that change while it runs
(MCP servers' catalogues): new sessions get what the source offers then, and a call from an older
session is resolved through the source, which answers for tools that have gone since.

A session's tool list is a cache invariant, not a permission: every call is put to the
:class:`ToolGate` of the context it runs in (who the tools act for, and what they may use *now*), and
a refused call gets the gate's sentence as its result. The schema bytes never change for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent.db.errors import StorageError
from agent.files.text import valid_text
from agent.model.media import Media
from agent.model.messages import Message, ToolCall, tool_result

if TYPE_CHECKING:
    from agent.memory import MemoryStore
    from agent.paid import Payer
    from agent.skills import SkillLibrary
    from agent.store import SessionStore
    from agent.tools.approval import Approver

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 50_000
# What the model is told when a tool fails by no fault of its call. Never the error's own text: that
# names files, database URLs and hosts, which are the owner's business (they are in the log).
STORAGE_FAILED = "Tool '{tool}' could not be run: Herald's database cannot be used now; try again later."
CRASHED = "Tool '{tool}' failed unexpectedly ({kind}); the details are in Herald's log."


class ToolError(Exception):
    """A tool failed in a way the model can act on; the message is returned as an error result, so it
    names no file, folder, database, URL or host of Herald's own (only what the model itself gave)."""


Delegate = Callable[[Sequence[str]], Awaitable[list["SideOutcome"]]]


class ToolGate(Protocol):
    """Asked right before each tool call runs: may the call go ahead now?"""

    async def refusal(self, name: str) -> str | None:
        """Why the tool ``name`` may not run now, in one sentence for the model; None: it may."""
        ...


@dataclass(frozen=True)
class Refuse:
    """A gate that refuses ``names`` whatever happens (a scheduled run may not create jobs)."""

    names: frozenset[str] = frozenset()

    async def refusal(self, name: str) -> str | None:
        return f"The tool '{name}' is not available in this context." if name in self.names else None


OPEN = Refuse()  # refuses nothing


@dataclass(frozen=True)
class AllGates:
    """A call runs only when every gate lets it (a sub-agent: its parent's gate and its own limits)."""

    gates: tuple[ToolGate, ...]

    async def refusal(self, name: str) -> str | None:
        for gate in self.gates:
            if (reason := await gate.refusal(name)) is not None:
                return reason
        return None


def both(first: ToolGate, second: ToolGate) -> ToolGate:
    """A gate that lets a call through only when ``first`` and ``second`` do."""
    if second == OPEN:
        return first
    return second if first == OPEN else AllGates((first, second))


@dataclass(frozen=True)
class SideOutcome:
    """What one sub-agent achieved, for the delegate tool's answer."""

    text: str
    error: str | None
    input_tokens: int
    cache_read_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ToolContext:
    """What a handler may touch. Nothing platform-specific lives here.

    ``delegate`` runs sub-agents on the session's own prompt (None where delegation is not allowed:
    inside a sub-agent at the maximum depth, or when the delegate tool set is off). ``trusted`` is
    true only for the owner's sessions (the terminal, ``gateway.admins`` in their direct chats):
    tools that could reach the owner's network or machine check it (``gateway.tools_for_guests``).
    ``gate`` is asked before each call (the caller's current rights; sub-agents inherit it).
    ``approver`` is who may say yes to a dangerous action (``agent.tools.approval``): the person a chat's
    turn answers; None where nobody can be asked (a scheduled run, a sub-agent, a review).
    """

    session_id: str
    session_key: str  # the chat the session belongs to: scopes what its tools may read
    store: SessionStore
    memory: MemoryStore
    skills: SkillLibrary
    payer: Payer  # paid services a tool uses (web_search) are charged through it like model requests
    delegate: Delegate | None = None
    trusted: bool = False
    gate: ToolGate = OPEN
    approver: Approver | None = None


@dataclass(frozen=True)
class ToolOutput:
    """A result with images (a browser screenshot): the text, and the files the model sees with it
    (stored and sent like a user's photo, ``agent.model.wire``)."""

    text: str
    media: tuple[Media, ...] = ()


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[str | ToolOutput]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    guidance: str  # one line of tool-use guidance for the stable prompt layer
    toolset: str  # the name that enables it in config (``agent.toolsets``)

    def schema(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


class ToolSource(Protocol):
    """Tools that change while Herald runs, asked for at every :meth:`ToolRegistry.enabled` and ``get``."""

    def tools(self) -> Iterable[Tool]:
        """The tools a session started now gets."""
        ...

    def find(self, name: str) -> Tool | None:
        """The tool to run for a call to ``name``. It may be one :meth:`tools` no longer lists (its handler
        then answers with a clear error); None when ``name`` is none of this source's."""
        ...


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool], sources: Iterable[ToolSource] = ()) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self._sources = tuple(sources)

    def enabled(self, toolsets: Collection[str]) -> list[Tool]:
        """Tools of the enabled toolsets in name order: a fixed order keeps the schema bytes stable.
        A source's tool never replaces a fixed tool of the same name."""
        tools = dict(self._tools)
        for source in self._sources:
            for tool in source.tools():
                tools.setdefault(tool.name, tool)
        return sorted((t for t in tools.values() if t.toolset in toolsets), key=lambda t: t.name)

    def fixed(self, name: str) -> Tool | None:
        """The tool fixed at start-up called ``name`` (None: none; a source's tools are not looked at)."""
        return self._tools.get(name)

    def get(self, name: str) -> Tool | None:
        if name in self._tools:
            return self._tools[name]
        for source in self._sources:
            if (tool := source.find(name)) is not None:
                return tool
        return None

    def with_tools(self, *tools: Tool) -> ToolRegistry:
        """This registry plus ``tools`` (the composition root adds tools that live outside the core)."""
        return ToolRegistry([*self._tools.values(), *tools], self._sources)

    def with_source(self, source: ToolSource) -> ToolRegistry:
        """This registry plus the changing tools of ``source``."""
        return ToolRegistry(self._tools.values(), [*self._sources, source])


def tools_json(tools: Iterable[Tool]) -> str:
    """The exact schema bytes a session stores and re-sends."""
    return json.dumps([tool.schema() for tool in tools], ensure_ascii=False, separators=(",", ":"))


def tool_guidance(tools: Iterable[Tool]) -> tuple[str, ...]:
    return tuple(tool.guidance for tool in tools if tool.guidance)


async def run_tool(
    registry: ToolRegistry,
    call: ToolCall,
    context: ToolContext,
    allowed: Collection[str],
) -> Message:
    """Run one tool call and turn any outcome, including a crash, into a tool result message.

    ``allowed`` is the set of tool names in the session's stored schema list: a session never runs a
    tool it did not advertise, even if the registry gained it since. An advertised tool the context's
    gate refuses (a cron run may not create jobs; a right taken away since the session started) stays
    in the schema, because removing it would change the prompt bytes the cache holds, and is refused
    here instead, with the gate's sentence.
    """
    tool = registry.get(call.name)
    if tool is None or call.name not in allowed:
        return tool_result(
            call, f"Unknown tool '{call.name}'. Available: {', '.join(sorted(allowed))}.", is_error=True
        )
    refusal = await context.gate.refusal(call.name)
    if refusal is not None:
        return tool_result(call, refusal, is_error=True)
    try:
        json.loads(call.arguments_json or "{}")
    except json.JSONDecodeError as exc:
        return tool_result(call, f"Arguments are not valid JSON ({exc}); send a JSON object.", is_error=True)
    media: tuple[Media, ...] = ()
    try:
        output = await tool.handler(call.arguments, context)
    except ToolError as exc:
        return tool_result(call, str(exc), is_error=True)
    except StorageError as exc:  # its message names the database (a file, a URL): for the owner only
        log.warning("tool %s: %s", call.name, exc)
        return tool_result(call, STORAGE_FAILED.format(tool=call.name), is_error=True)
    except Exception as exc:  # a tool bug must not kill the turn; the model sees that it happened
        log.exception("tool %s crashed", call.name)
        return tool_result(call, CRASHED.format(tool=call.name, kind=type(exc).__name__), is_error=True)
    if isinstance(output, ToolOutput):
        text, media = output.text, output.media
    else:
        text = output
    text = valid_text(text)  # a web page or an MCP server may send anything
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... truncated: result was {len(text):,} characters]"
    return tool_result(call, text, media=media)
