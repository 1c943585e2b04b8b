"""The Model Context Protocol client: the tools of configured MCP servers (``mcp.servers``) as Herald tools.

- :mod:`agent.mcp.transport`: an SDK client for one server from its config (``$NAME`` from the environment);
- :mod:`agent.mcp.stderr`: what a stdio server writes to stderr, kept for the reason it stopped;
- :mod:`agent.mcp.connection`: one connected server: handshake, tool list, calls with a deadline;
- :mod:`agent.mcp.failures`: one line on why a server did not start or stopped;
- :mod:`agent.mcp.tools`: a server's tools as Herald :class:`~agent.tools.registry.Tool` (allow/deny);
- :mod:`agent.mcp.results`: a tool result as text for the model, in the untrusted envelope;
- :mod:`agent.mcp.servers`: the set of servers while Herald runs: start, current catalogue, calls, close.

Their ``server__tool`` names are :mod:`agent.tools.mcp_names`, outside this package: the agent names
and checks MCP tools without importing the SDK, which only configured servers need.

A session's tool list is fixed when it starts (docs/ARCHITECTURE.md, "Media and tools"): a server's new tools
serve new sessions only, and a session calling a tool that has gone since gets a clear error result.
"""

from agent.mcp.connection import StartFailed, connect
from agent.mcp.servers import McpServers
from agent.mcp.tools import offered

__all__ = ["McpServers", "StartFailed", "connect", "offered"]
