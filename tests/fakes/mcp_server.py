"""An MCP server built with the ``mcp`` SDK, for Herald's MCP client tests.

Served over stdio (``python -m tests.fakes.mcp_server``: one process per server, where the process is
the point: a crash, a hang, closing; ``python -m tests.fakes.mcp_server noisy N`` first prints N lines
that are not MCP messages to stdout, as a chatty wrapper script does) or over streamable HTTP on
127.0.0.1 (:func:`serve_http`, port 0, in the test's own event loop; ``python -m tests.fakes.mcp_server
http``: a process of its own that prints its URL, for a server that dies in the middle of a call).

Tools:
- ``echo`` / ``add``: plain answers;
- ``slow``: sleeps ``seconds`` (longer than a test's call timeout);
- ``picture``: a text block, an image and a resource link (what the client must describe);
- ``fail``: an ``isError`` result;
- ``add_tool`` / ``remove_tool``: change the catalogue and announce it (``tools/list_changed``);
- ``whoami`` (HTTP only): the Authorization header the request came with;
- ``crash`` (a process of its own only: stdio, or HTTP as a process): the process exits mid-call.

``serve_http(legacy=True)`` makes it a 2025-era server (it refuses ``server/discover``, so clients use
the initialize handshake and hear ``notifications/tools/list_changed`` without listening), as most
servers still are.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND

from tests.fakes.waiting import WAIT_TIMEOUT, wait_until

# A 1x1 PNG: small, and a real image for the client to describe.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def echo(text: str) -> str:
    """Repeat the text."""
    return f"echo: {text}"


def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds} s"


def picture() -> list[types.ContentBlock]:
    """A caption, a picture and a link."""
    encoded = base64.b64encode(PIXEL_PNG).decode()
    return [
        types.TextContent(text="A red pixel:"),
        types.ImageContent(data=encoded, mime_type="image/png"),
        types.ResourceLink(uri="file:///srv/pixel.png", name="pixel.png", mime_type="image/png"),
    ]


def fail(reason: str) -> str:
    """Always fails with the reason given."""
    raise ToolError(f"cannot do that: {reason}")


def crash(last_words: str = "") -> str:
    """The server process exits without answering (after writing ``last_words`` to stderr)."""
    if last_words:
        print(last_words, file=sys.stderr, flush=True)
    os._exit(3)


def extra(text: str) -> str:
    """A tool added at run time."""
    return f"extra: {text}"


def whoami(ctx: Context) -> str:
    """The Authorization header of this request."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", {})
    return f"authorization: {headers.get('authorization', '(none)')}"


async def refuse_discover(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """What a 2025-era server answers to the 2026 probe."""
    if ctx.method == "server/discover":
        raise MCPError(METHOD_NOT_FOUND, "Method not found")
    return await call_next(ctx)


def build_server(*, in_process: bool, legacy: bool = False) -> MCPServer:
    """The test server; ``crash`` only where it ends a process of its own (stdio)."""
    server = MCPServer("herald-test", version="1.0")
    if legacy:
        server.middleware.append(refuse_discover)
    tools: list[Callable[..., Any]] = [echo, add, slow, picture, fail, *([whoami] if in_process else [crash])]

    async def changed(ctx: Context) -> None:
        # Both eras: a 2026 connection hears it through subscriptions/listen, an older one as a
        # plain notification (each call reaches nobody on the other era).
        await ctx.notify_tools_changed()
        await ctx.request_context.session.send_tool_list_changed()

    async def add_tool(name: str, ctx: Context) -> str:
        """Offer a new tool NAME (it answers like echo) and announce the change."""
        server.add_tool(extra, name=name)
        await changed(ctx)
        return f"added {name}"

    async def remove_tool(name: str, ctx: Context) -> str:
        """Stop offering the tool NAME and announce the change."""
        server.remove_tool(name)
        await changed(ctx)
        return f"removed {name}"

    for tool in [*tools, add_tool, remove_tool]:
        server.add_tool(tool)
    return server


@contextlib.asynccontextmanager
async def serve_http(*, legacy: bool = False) -> AsyncIterator[str]:
    """Serve a fresh test server over streamable HTTP on 127.0.0.1; yields its URL."""
    app = build_server(in_process=True, legacy=legacy).streamable_http_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve(sockets=[sock]))

    def started() -> bool:
        if task.done():
            task.result()  # it failed to start: say why
        return http.started

    try:
        await wait_until(started, what="the MCP test server serving")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        http.should_exit = True
        async with asyncio.timeout(WAIT_TIMEOUT):
            await task
        sock.close()


def serve_http_process() -> None:
    """Streamable HTTP in this process, on a free port of 127.0.0.1; the URL is the first line printed
    (the socket already listens then: connections wait in its backlog until the server accepts)."""
    app = build_server(in_process=False).streamable_http_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        serve_http_process()
    else:
        if sys.argv[1:2] == ["noisy"]:
            for number in range(int(sys.argv[2])):
                print(f"server.js: listening, worker {number} ready", flush=False)
            sys.stdout.flush()
        build_server(in_process=False).run("stdio")
