"""One line on why an MCP server did not start or stopped: for the log and ``herald doctor``
(:func:`describe`), and for the model (:func:`brief`).

The SDK raises transport errors wrapped in task-group exception groups; the first leaf is the cause.
Nothing here prints an ``env`` or ``headers`` value: errors name variables, never their values. What
the model is told names the kind of failure only: no command, path, URL or line the server wrote
(those are the owner's business, and a server's stderr may hold anything).
"""

from __future__ import annotations

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from agent.mcp.transport import SetupError
from agent.settings import McpServer


def cause(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def describe(
    error: BaseException, settings: McpServer, stderr_line: str | None = None, http_status: int | None = None
) -> str:
    """What went wrong, in a few words; a stdio server's last stderr line is added when it wrote one.
    ``http_status`` is the HTTP error a URL server last answered with (the SDK's errors leave it out)."""
    error = cause(error)
    text = _reason(error, settings, http_status)
    return f"{text}; its last words on stderr: {stderr_line}" if stderr_line else text


def _reason(error: BaseException, settings: McpServer, http_status: int | None) -> str:
    if isinstance(error, SetupError):
        return str(error)
    if isinstance(error, OSError) and settings.command is not None:
        return f"cannot run {settings.command!r}: {error.strerror or error}"
    if isinstance(error, httpx2.HTTPStatusError):
        return f"its URL answered HTTP {error.response.status_code}"
    if isinstance(error, httpx2.TimeoutException):
        return "its URL did not answer in time"
    if isinstance(error, httpx2.HTTPError):
        return f"cannot reach its URL ({error})"
    if isinstance(error, MCPError):
        if error.code == CONNECTION_CLOSED:
            return "its process exited" if settings.command is not None else "it closed the connection"
        if error.code == REQUEST_TIMEOUT:
            return "it did not answer in time"
        if http_status in (401, 403):
            return f"its URL answered HTTP {http_status}: check its headers (the token)"
        if http_status is not None:
            return f"its URL answered HTTP {http_status} ({error.message})"
        return f"it answered with an error: {error.message}"
    return f"{type(error).__name__}: {error}"


def brief(error: BaseException, settings: McpServer, http_status: int | None = None) -> str:
    """What went wrong, in a few words for the model (see the module docstring)."""
    error = cause(error)
    if isinstance(error, SetupError):
        return "its configuration is incomplete"
    if isinstance(error, OSError) and settings.command is not None:
        return "its program cannot be run"
    if isinstance(error, httpx2.HTTPStatusError):
        return f"its URL answered HTTP {error.response.status_code}"
    if isinstance(error, httpx2.TimeoutException):
        return "its URL did not answer in time"
    if isinstance(error, httpx2.HTTPError):
        return "its URL cannot be reached"
    if isinstance(error, MCPError):
        if error.code == CONNECTION_CLOSED:
            return "its process exited" if settings.command is not None else "it closed the connection"
        if error.code == REQUEST_TIMEOUT:
            return "it did not answer in time"
        if http_status is not None:
            return f"its URL answered HTTP {http_status}"
        return "it answered with an error"
    return f"it failed ({type(error).__name__})"
