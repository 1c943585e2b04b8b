"""One MCP server, connected: the SDK client over its transport, its tool list, calls with a deadline.

:func:`connect` is an async context manager. Entering starts the server (or reaches its URL), runs the
handshake and lists its tools, all within ``connect_timeout``; anything that goes wrong on the way is
raised as :class:`StartFailed` with a one-line reason, after what was opened has been closed. Exiting
closes the connection; the SDK ends a stdio server by closing its stdin, then terminating its process
group, every wait bounded.

Enter and exit it in one task: the SDK's task groups belong to the task that entered them.

A server announces a changed tool list as ``notifications/tools/list_changed``; 2026-era servers send
it only to a client that listens (``subscriptions/listen``), so for them a watcher task keeps a
subscription open. Either way ``on_tools_changed`` is called (possibly twice for one change).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agent.mcp.failures import brief, describe
from agent.mcp.stderr import StderrTail
from agent.mcp.stdout import StdoutNoise, quiet_sdk_parse_errors
from agent.mcp.transport import HttpErrors, make_client
from agent.settings import McpServer
from resilience.cancelling import cancel_and_wait

log = logging.getLogger(__name__)

MAX_PAGES = 100  # tools/list pages read at most: a server whose cursor never ends cannot hang a start
RELISTEN_DELAY = 5.0  # seconds before listening again after a server dropped the subscription

quiet_sdk_parse_errors()  # a server's stray stdout is counted (StdoutNoise), not logged line by line


class StartFailed(Exception):
    """The server did not start, or did not answer the handshake and tool list in time. ``reason`` is
    for the owner (the log, ``herald doctor``), ``brief`` for the model (:func:`failures.brief`)."""

    def __init__(self, reason: str, brief: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.brief = brief


@dataclass
class McpConnection:
    """A started server. ``tools`` is its tool list as it was at start, in the server's order."""

    name: str
    settings: McpServer
    client: Client
    stderr: StderrTail | None  # stdio servers only
    stdout: StdoutNoise  # stdio servers: lines on stdout that are not MCP messages
    http_errors: HttpErrors  # URL servers: the last HTTP error status
    tools: list[types.Tool]

    async def list_tools(self) -> list[types.Tool]:
        """The server's whole tool list now, in its order.

        Raises TimeoutError after ``settings.timeout`` seconds and :class:`MCPError` when the server
        refuses or is gone (code ``CONNECTION_CLOSED``).
        """
        async with asyncio.timeout(self.settings.timeout):
            return await _all_tools(self.client)

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool`` (the server's own name for it).

        Raises TimeoutError after ``settings.timeout`` seconds (the server is told the call was
        cancelled), :class:`MCPError` when the server refuses the call or is gone (``CONNECTION_CLOSED``),
        and RuntimeError or pydantic's ValidationError when its answer breaks the protocol.
        """
        async with asyncio.timeout(self.settings.timeout):
            return await self.client.call_tool(tool, arguments)

    async def why_stopped(self, error: BaseException, since: float) -> tuple[str, str]:
        """Why a connection that broke with ``error`` did: for the owner, with the last line a stdio
        server wrote to stderr at ``since`` (the event loop's clock: when the failed request began) or
        later, and for the model (:func:`failures.brief`)."""
        line = await self.stderr.ended(since) if self.stderr is not None else None
        last = self.http_errors.last
        return describe(error, self.settings, line, last), brief(error, self.settings, last)


async def _all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


@asynccontextmanager
async def connect(
    name: str,
    settings: McpServer,
    environ: Mapping[str, str],
    on_tools_changed: Callable[[], None] = lambda: None,
    stdout: StdoutNoise | None = None,
) -> AsyncIterator[McpConnection]:
    """The started server ``name`` (see the module docstring); raises :class:`StartFailed`. ``stdout``
    counts its stray stdout over several starts (default: this one's alone, never logged)."""
    noise = stdout if stdout is not None else StdoutNoise(name, logged=False)
    messages = _Messages(name, on_tools_changed, noise)
    async with AsyncExitStack() as stack:
        stderr = await stack.enter_async_context(StderrTail(name)) if settings.command is not None else None
        http_errors = HttpErrors()
        began = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(settings.connect_timeout):
                errlog = stderr.file if stderr is not None else None
                client = make_client(settings, environ, errlog, http_errors, messages)
                await stack.enter_async_context(client)
                if stderr is not None:
                    stderr.release()  # the server process has its own copy now
                tools = await _all_tools(client)
        except Exception as error:
            if stderr is not None:
                stderr.release()
            line = await stderr.ended(began) if stderr is not None else None
            if isinstance(error, TimeoutError):
                reason = short = f"did not start within {settings.connect_timeout:g} s"
            else:
                reason = describe(error, settings, line, http_errors.last)
                short = brief(error, settings, http_errors.last)
            raise StartFailed(noise.added_to(reason), short) from error
        messages.running = True
        noise.heard_while_running(asyncio.get_running_loop().time())  # what it wrote while starting
        capability = client.server_capabilities.tools
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS and capability and capability.list_changed:
            watch = asyncio.create_task(
                _listen_for_changes(name, client, on_tools_changed), name=f"mcp {name}"
            )
            stack.push_async_callback(_cancel, watch)
        yield McpConnection(name, settings, client, stderr, noise, http_errors, tools)


@dataclass
class _Messages:
    """What the SDK calls for each server notification (and transport error)."""

    name: str
    on_tools_changed: Callable[[], None]
    stdout: StdoutNoise
    running: bool = False  # started: stray stdout is logged now, not kept for a failed start's reason

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.on_tools_changed()
        elif isinstance(message, Exception):
            if not self.stdout.note(message):
                log.debug("MCP server %s: transport error: %r", self.name, message)
            elif self.running:
                self.stdout.heard_while_running(asyncio.get_running_loop().time())


async def _listen_for_changes(name: str, client: Client, on_tools_changed: Callable[[], None]) -> None:
    """Keep a ``subscriptions/listen`` stream for tool changes open (2026-era servers) while connected.

    Never raises: a subscription the server drops is opened again (and the tools re-listed, since a
    change may have gone unheard meanwhile); a connection that ended ends the watch.
    """
    while True:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    on_tools_changed()
            return  # closed gracefully: the server announces nothing more
        except SubscriptionLost:
            pass
        except MCPError as error:
            if error.code != CONNECTION_CLOSED:
                log.warning("MCP server %s: cannot listen for tool changes (%s)", name, error.message)
            return
        except Exception as error:  # the transport failed under the subscription
            log.warning("MCP server %s: stopped listening for tool changes (%r)", name, error)
            return
        await asyncio.sleep(RELISTEN_DELAY)
        on_tools_changed()


async def _cancel(task: asyncio.Task[None]) -> None:
    await cancel_and_wait([task])
