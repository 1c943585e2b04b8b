"""What the person a turn acts for may use now: asked before every tool call, and of a session's tool list.

A session's tool list is fixed when it starts (docs/ARCHITECTURE.md, cache invariant 1): it is a cache
invariant, not a permission. Rights are worked out from

- the configuration the process started with: ``agent.toolsets``, ``gateway.tools_for_guests``,
  ``mcp.servers`` (each server's ``enabled``, ``allow`` and ``deny``), ``gateway.admins`` and the
  allowlists, so a restart with a narrower configuration narrows them for every existing session;
- the database, for approvals (``gateway.access.auth``): ``herald pairing revoke`` run in another process
  takes effect at the next tool call.

One rule (:func:`refusal`), two uses:

- :class:`Rights` is the gate the agent asks before each call of a chat's turn, its sub-agents, a
  scheduled run and a background review: a tool no longer allowed gets one sentence as its result;
- :func:`taken_away` lists the tools of a session's frozen list its people may no longer use: a chat
  whose session has any is given a new session at its next message (``gateway.conversation.turns``).

Giving a right shows in new sessions only: a frozen list is never widened (its bytes are cached).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from agent.api import Tool, server_of, tool_name
from agent.memory import OWNER_SCOPE
from agent.settings import McpServer, McpSettings
from gateway.access.auth import Authorizer, Speaker
from gateway.config import HeraldConfig

MCP_TOOLSET = "mcp"
NO_TOOL = "No tool may run: the person this conversation is for {lost}."


class Lost(StrEnum):
    """What a person lost that stops them acting where they did (with their name in front, a sentence)."""

    ACCESS = "no longer has access to the bot"
    ADMIN = "is no longer one of the bot's admins, and this has the owner's memory"


async def lost(authorizer: Authorizer, speaker: Speaker | None, memory_scope: str) -> Lost | None:
    """What ``speaker`` lost since they started acting with ``memory_scope`` (None: nothing; and for
    nobody to check). Approvals are read from the database: a revocation elsewhere counts at once."""
    if speaker is None:
        return None
    if not await authorizer.is_allowed(speaker):
        return Lost.ACCESS
    if memory_scope == OWNER_SCOPE and not authorizer.is_admin(speaker.platform, speaker.user_id):
        return Lost.ADMIN
    return None


def session_toolsets(config: HeraldConfig, memory_scope: str) -> tuple[str, ...]:
    """The tool sets a session of ``memory_scope`` gets now: all of ``agent.toolsets`` for the owner,
    only those ``gateway.tools_for_guests`` also names for anyone else (a group, another person, their
    jobs).

    Guests share one tool list among themselves and owners another, so each family still reads its
    prompt prefix from the cache (docs/ARCHITECTURE.md, cache invariant 2).
    """
    enabled = config.agent.toolsets
    if memory_scope == OWNER_SCOPE:
        return tuple(enabled)
    guests = set(config.gateway.tools_for_guests)
    return tuple(toolset for toolset in enabled if toolset in guests)


def mcp_settings(config: HeraldConfig) -> McpSettings:
    """The MCP servers to start: none when the mcp tool set is off (nobody could use their tools)."""
    return config.mcp if MCP_TOOLSET in config.agent.toolsets else McpSettings()


@dataclass(frozen=True)
class ToolRights:
    """What sessions of one memory scope may use now: the tool sets, and the MCP servers configured."""

    toolsets: frozenset[str]
    mcp: McpSettings

    @classmethod
    def of(cls, config: HeraldConfig, memory_scope: str) -> ToolRights:
        return cls(frozenset(session_toolsets(config, memory_scope)), mcp_settings(config))


def _mcp_tool_allowed(name: str, server: str, settings: McpServer) -> bool:
    """Whether the server's ``allow`` and ``deny`` (the server's own tool names) let ``name`` through."""
    if settings.allow and name not in {tool_name(server, tool) for tool in settings.allow}:
        return False
    return name not in {tool_name(server, tool) for tool in settings.deny}


def _no_longer(name: str) -> str:
    return f"The tool '{name}' may no longer be used"


def refusal(name: str, rights: ToolRights, fixed: Callable[[str], Tool | None]) -> str | None:
    """Why ``rights`` no longer cover the tool ``name``, in one sentence for the model; None: they do.

    ``fixed`` finds the tools fixed at start-up (their tool set is theirs); any other ``server__tool``
    name is an MCP server's. A name that is neither is not a right taken away (a tool that is not there
    now, such as web_search without its key): the call is answered as an unknown tool.
    """
    tool = fixed(name)
    server = server_of(name) if tool is None else None
    toolset = tool.toolset if tool is not None else MCP_TOOLSET if server is not None else None
    if toolset is None:
        return None
    if toolset not in rights.toolsets:
        return f"{_no_longer(name)} here: the owner has taken its tool set '{toolset}' away."
    if server is None:
        return None
    settings = rights.mcp.servers.get(server)
    if settings is None:
        return f"{_no_longer(name)}: the MCP server '{server}' was removed from the configuration."
    if not settings.enabled:
        return f"{_no_longer(name)}: the MCP server '{server}' is turned off in the configuration."
    if not _mcp_tool_allowed(name, server, settings):
        return f"{_no_longer(name)}: the configuration no longer allows it for the MCP server '{server}'."
    return None


def taken_away(names: Iterable[str], rights: ToolRights, fixed: Callable[[str], Tool | None]) -> list[str]:
    """The tools of ``names`` (a session's frozen list) that ``rights`` no longer cover, in name order."""
    return sorted(name for name in names if refusal(name, rights, fixed) is not None)


@dataclass
class Rights:
    """The gate of one turn or run (``agent.tools.registry.ToolGate``): who its tools act for, and what
    they may use. ``speaker`` None: nobody to check (the command line, a job made before Herald
    recorded who made it); the tool sets still follow the configuration. Once the speaker is found to
    have lost access, that stands for the rest of the turn (:meth:`still_allowed`: its answer stops
    streaming)."""

    tools: ToolRights
    fixed: Callable[[str], Tool | None]  # the registry's tools fixed at start-up
    authorizer: Authorizer
    speaker: Speaker | None
    memory_scope: str
    _lost: Lost | None = field(default=None, init=False)

    async def standing(self) -> str | None:
        """Why the speaker may not act at all now (access revoked, or no longer an admin while the
        session reads the owner's memory); None: they may."""
        if self._lost is None:
            self._lost = await lost(self.authorizer, self.speaker, self.memory_scope)
        return None if self._lost is None else NO_TOOL.format(lost=self._lost.value)

    def still_allowed(self) -> bool:
        """False once a tool call found the speaker without access (no database read here)."""
        return self._lost is None

    async def refusal(self, name: str) -> str | None:
        """The configuration first (no database read), then the speaker's standing."""
        return refusal(name, self.tools, self.fixed) or await self.standing()

    def taken_away(self, names: Iterable[str]) -> list[str]:
        return taken_away(names, self.tools, self.fixed)


def rights_for(
    config: HeraldConfig,
    fixed: Callable[[str], Tool | None],
    authorizer: Authorizer,
    speaker: Speaker | None,
    memory_scope: str,
) -> Rights:
    """The rights of ``speaker`` in a session of ``memory_scope``, by the configuration ``config``."""
    return Rights(ToolRights.of(config, memory_scope), fixed, authorizer, speaker, memory_scope)
