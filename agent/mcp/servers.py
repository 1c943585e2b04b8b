"""The configured MCP servers while Herald runs: started together, their current tools, calls, closing.

:meth:`McpServers.open` starts every enabled server at once, each within its ``connect_timeout``. A
server that does not start is logged in one line and left out; Herald starts anyway. Each server is
held by a task of its own (the SDK's task groups belong to the task that opened them), which also
re-lists the server's tools when it announces a change. Closing never hangs: every wait is bounded and
stdio processes are terminated.

As a :class:`~agent.tools.registry.ToolSource` it gives new sessions the current catalogue, and answers
a call from an older session to a tool that has gone (removed by its server, or the server is not
running) with a clear error. A call never raises out of the turn: timeouts, refusals and a server that
dies mid-call all become error results the model can read.

A server that is not running (it did not start, or it stopped: its process died, its HTTP connection
broke) is started again in the background after ``RETRY_FIRST`` seconds, then after twice as long each
time it fails again, up to ``RETRY_MAX`` (the one jittered backoff, ``resilience.backoff``); only the
first failure and the recovery are logged (whatever the server writes: lines on its stdout that are not
MCP are counted, see :mod:`agent.mcp.stdout`). Until it runs again its tools answer that it is not
running, and new sessions do not get them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from pydantic import ValidationError

from agent.mcp.connection import McpConnection, StartFailed, connect
from agent.mcp.failures import brief, describe
from agent.mcp.results import marked, result_text
from agent.mcp.stdout import StdoutNoise
from agent.mcp.tools import herald_tool, offered, unavailable_tool
from agent.settings import McpServer, McpSettings
from agent.tools.mcp_names import server_of, tool_name
from agent.tools.registry import Handler, Tool, ToolContext, ToolError
from resilience.backoff import Backoff, Streak
from resilience.cancelling import wait_event
from resilience.loops import BackgroundLoop

log = logging.getLogger(__name__)

START_GRACE = 1.0  # seconds past connect_timeout Herald waits for a failed start to be reported
CLOSE_TIMEOUT = 10.0  # seconds closing one server may take before its task is cancelled
RETRY_FIRST = 30.0  # seconds before a server that is not running is started again
RETRY_MAX = 600.0  # the longest wait between two attempts (the wait doubles after each failure)
STARTING = "it is starting"


@dataclass
class _Server:
    """One configured server's state. ``down`` says why it is not running (None while it runs), for the
    owner; ``brief`` says it for the model (no command, path, URL or stderr line: ``failures.brief``)."""

    name: str
    settings: McpServer
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # set: re-list the tools (or closing)
    connection: McpConnection | None = None
    tools: dict[str, Tool] = field(default_factory=dict)  # by Herald name: what new sessions get
    down: str | None = STARTING
    brief: str = STARTING
    loop: BackgroundLoop | None = None  # runs it, and starts it again, until Herald closes
    stdout: StdoutNoise = field(init=False)  # its stray stdout, over all its starts

    def __post_init__(self) -> None:
        self.stdout = StdoutNoise(self.name)


class McpServers:
    """The servers of ``mcp.servers`` (see the module docstring). Use :meth:`open`."""

    def __init__(self, settings: McpSettings, environ: Mapping[str, str]) -> None:
        self._environ = environ
        self._closing = asyncio.Event()
        self._servers = {name: _Server(name, server) for name, server in settings.servers.items()}
        for server in self._servers.values():
            if not server.settings.enabled:
                server.down = server.brief = "it is disabled in config (enabled: false)"

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: McpSettings, environ: Mapping[str, str]) -> AsyncIterator[McpServers]:
        """Start the enabled servers of ``settings``; ``$NAME`` values are read from ``environ``."""
        servers = cls(settings, environ)
        try:
            await servers._start_all()
            yield servers
        finally:
            await servers._close_all()

    def tools(self) -> list[Tool]:
        """The tools of every running server, after allow/deny."""
        return [tool for server in self._servers.values() for tool in server.tools.values()]

    def find(self, name: str) -> Tool | None:
        server_name = server_of(name)
        if server_name is None:
            return None
        server = self._servers.get(server_name)
        if server is None:
            return unavailable_tool(
                name,
                f"The tool {name} is no longer available: no MCP server '{server_name}' is in use any more.",
            )
        if server.down is not None:
            return unavailable_tool(name, _not_running(name, server))
        return server.tools.get(name) or unavailable_tool(name, _removed(name, server))

    def problems(self) -> dict[str, str]:
        """Why each configured server that is not running is not (by server name)."""
        return {name: server.down for name, server in self._servers.items() if server.down is not None}

    async def _start_all(self) -> None:
        enabled = [server for server in self._servers.values() if server.settings.enabled]
        await asyncio.gather(*(self._start(server) for server in enabled))

    async def _start(self, server: _Server) -> None:
        ready: asyncio.Future[StartFailed | None] = asyncio.get_running_loop().create_future()
        keep_running = functools.partial(self._keep_running, server, ready)
        server.loop = BackgroundLoop(f"MCP server '{server.name}'", keep_running).start()
        done, _ = await asyncio.wait({ready}, timeout=server.settings.connect_timeout + START_GRACE)
        if done:
            failed = ready.result()
        else:  # its task goes on closing what it opened in the background, then tries again later; the
            # lines it wrote are told here, as its own failure comes too late to be heard
            late = f"did not start within {server.settings.connect_timeout:g} s"
            failed = StartFailed(server.stdout.added_to(late), late)
        if failed is not None:
            server.down, server.brief = failed.reason, failed.brief
            log.warning(
                "MCP server '%s' did not start (%s); Herald goes on without its tools and tries again in "
                "%g s (`herald doctor` checks it)",
                server.name,
                failed.reason,
                RETRY_FIRST,
            )

    async def _keep_running(self, server: _Server, ready: asyncio.Future[StartFailed | None]) -> None:
        """The server's task until Herald closes: run it, and start it again (after a growing wait)
        whenever it is not running. ``ready`` gets the outcome of the first start (None: it runs)."""
        restarts = Streak(Backoff(RETRY_FIRST, max(RETRY_FIRST, RETRY_MAX)))
        while not self._closing.is_set():
            if await self._run(server, ready):
                restarts.reset()  # it ran: the next failure starts the waits over
            await wait_event(self._closing, restarts.next_delay())

    async def _run(self, server: _Server, ready: asyncio.Future[StartFailed | None]) -> bool:
        """Start the server and serve it until it stops or Herald closes; whether it started."""
        try:
            async with connect(
                server.name, server.settings, self._environ, server.wake.set, server.stdout
            ) as connection:
                again = server.down != STARTING
                server.connection = connection
                self._install(server, connection.tools)
                server.down = None
                if not ready.done():
                    ready.set_result(None)
                if again:
                    log.info("MCP server '%s' runs again; new sessions get its tools", server.name)
                await self._follow_changes(server)
            return True
        except StartFailed as failure:
            if not ready.done():
                ready.set_result(failure)
            else:
                log.debug("MCP server '%s' did not start again: %s", server.name, failure.reason)
                server.down, server.brief = failure.reason, failure.brief
            return False
        except Exception as error:  # the SDK's task group failed under the connection (transport error)
            why = describe(error, server.settings), brief(error, server.settings)
            if not ready.done():
                ready.set_result(StartFailed(*why))
            self._stopped(server, why)
            return True
        finally:
            server.connection = None
            if not ready.done():  # Herald closed before it started
                closed = "Herald closed before it started"
                ready.set_result(StartFailed(closed, closed))

    async def _follow_changes(self, server: _Server) -> None:
        """Re-list the tools whenever the server announces a change; return once it stopped or Herald
        closes (both set ``wake``)."""
        while not self._closing.is_set() and server.down is None:
            await server.wake.wait()
            server.wake.clear()
            if not self._closing.is_set() and server.down is None:
                await self._refresh(server)

    async def _refresh(self, server: _Server) -> None:
        """Re-list the server's tools after it announced a change: new sessions get the new list."""
        if server.connection is None or server.down is not None:
            return
        began = asyncio.get_running_loop().time()
        try:
            listed = await server.connection.list_tools()
        except MCPError as error:
            if error.code == CONNECTION_CLOSED:
                self._stopped(server, await server.connection.why_stopped(error, began))
            else:
                log.warning(
                    "MCP server '%s' announced new tools but did not list them: %s",
                    server.name,
                    error,
                )
            return
        except (TimeoutError, ValidationError) as error:
            log.warning("MCP server '%s' announced new tools but did not list them: %r", server.name, error)
            return
        before = set(server.tools)
        self._install(server, listed)
        added, removed = sorted(set(server.tools) - before), sorted(before - set(server.tools))
        if added or removed:
            log.info(
                "MCP server '%s' changed its tools (added: %s; removed: %s); new sessions get the new list",
                server.name,
                ", ".join(added) or "none",
                ", ".join(removed) or "none",
            )

    def _install(self, server: _Server, listed: Iterable[types.Tool]) -> None:
        tools: dict[str, Tool] = {}
        for mcp_tool in offered(server.settings, listed):
            tool = herald_tool(server.name, mcp_tool, self._handler(server, mcp_tool.name))
            if tool.name in tools:
                log.warning(
                    "MCP server '%s': two tools are named %s; the second is left out", server.name, tool.name
                )
                continue
            tools[tool.name] = tool
        server.tools = tools

    def _handler(self, server: _Server, tool: str) -> Handler:
        name = tool_name(server.name, tool)

        async def call(arguments: dict[str, Any], context: ToolContext) -> str:
            return await self._call(server, tool, name, arguments)

        return call

    async def _call(self, server: _Server, tool: str, name: str, arguments: dict[str, Any]) -> str:
        """Call ``tool`` (Herald's ``name``) of ``server``: its answer marked untrusted, or a ToolError the
        model can read."""
        connection = server.connection
        if connection is None or server.down is not None:
            raise ToolError(_not_running(name, server))
        if name not in server.tools:
            raise ToolError(_removed(name, server))
        began = asyncio.get_running_loop().time()
        try:
            result = await connection.call_tool(tool, arguments)
        except TimeoutError:
            raise ToolError(
                f"The MCP server '{server.name}' did not answer {name} within {server.settings.timeout:g} s; "
                "the call was abandoned."
            ) from None
        except MCPError as error:
            if error.code != CONNECTION_CLOSED:
                refusal = marked(server.name, tool, error.message)
                raise ToolError(
                    f"The MCP server '{server.name}' refused the call to {name}:\n{refusal}"
                ) from None
            why = await connection.why_stopped(error, began)
            self._stopped(server, why)
            raise ToolError(
                f"The MCP server '{server.name}' stopped during the call to {name} ({why[1]}); its tools are "
                "unavailable for now."
            ) from None
        except (RuntimeError, ValidationError) as error:  # an answer that breaks the protocol
            problem = marked(server.name, tool, str(error))
            raise ToolError(
                f"The MCP server '{server.name}' answered {name} with something unreadable:\n{problem}"
            ) from None
        text = marked(server.name, tool, result_text(result))
        if result.is_error:
            raise ToolError(text)
        return text

    def _stopped(self, server: _Server, why: tuple[str, str]) -> None:
        """Take a server that stopped out of the catalogue (``why``: for the owner, for the model); its
        task closes what is left and restarts it."""
        reason, server.brief = why
        if server.down is None:
            server.down = reason
            server.tools = {}
            server.wake.set()
            log.warning(
                "MCP server '%s' stopped (%s); Herald tries to start it again in %g s",
                server.name,
                reason,
                RETRY_FIRST,
            )

    async def _close_all(self) -> None:
        self._closing.set()
        for server in self._servers.values():
            server.wake.set()
        loops = [server.loop for server in self._servers.values() if server.loop is not None]
        if not loops:
            return
        _, pending = await asyncio.wait([loop.task for loop in loops], timeout=CLOSE_TIMEOUT)
        for loop in loops:
            if not loop.done:
                loop.cancel()
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_TIMEOUT)


def _not_running(name: str, server: _Server) -> str:
    return (
        f"The tool {name} is not available now: the MCP server '{server.name}' is not running "
        f"({server.brief})."
    )


def _removed(name: str, server: _Server) -> str:
    return f"The tool {name} is no longer available: the MCP server '{server.name}' removed it."
