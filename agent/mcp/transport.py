"""An SDK client for one configured MCP server: a stdio subprocess or a streamable HTTP endpoint.

``$NAME`` (or ``${NAME}``) in an ``env`` or ``headers`` value is replaced with Herald's environment
variable NAME, ``$$`` is a literal ``$``: secrets stay in ``.env``, not in config.yaml. A stdio server
gets the SDK's small default environment (PATH, HOME, ...) plus its ``env``, never Herald's secrets.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, TextIO

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client import Transport
from mcp.client.session import MessageHandlerFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent import version
from agent.settings import McpServer

if TYPE_CHECKING:  # the streams a transport yields: named only in a private module of the SDK
    from mcp.client._transport import TransportStreams

STREAM_READ_TIMEOUT = 300.0  # seconds a server may keep an event stream silent (the SDK's default)


class SetupError(Exception):
    """The server's config cannot be used as it is (a variable is not set); the message says which."""


@dataclass
class HttpErrors:
    """The HTTP error status of a URL server's last answer (None when it was no error): the SDK turns
    such an answer into a protocol error without it, and "HTTP 401" is what tells a user to check the
    token."""

    last: int | None = None

    async def record(self, response: httpx2.Response) -> None:
        self.last = response.status_code if response.status_code >= 400 else None


def expand(value: str, environ: Mapping[str, str], where: str) -> str:
    """``value`` with ``$NAME`` replaced from ``environ``; the error names the variable, never a value."""
    try:
        return Template(value).substitute(environ)
    except KeyError as missing:
        raise SetupError(f"the environment variable {missing.args[0]} ({where}) is not set") from None
    except ValueError:
        raise SetupError(f"{where} has a '$' that is not $NAME, ${{NAME}} or $$") from None


def stdio_parameters(settings: McpServer, environ: Mapping[str, str]) -> StdioServerParameters:
    assert settings.command is not None
    env = {key: expand(value, environ, f"env {key}") for key, value in settings.env.items()}
    command = settings.command
    return StdioServerParameters(
        command=str(Path(command).expanduser()) if command.startswith("~") else command,
        args=list(settings.args),
        env=env,
        cwd=settings.cwd.expanduser() if settings.cwd is not None else None,
    )


@asynccontextmanager
async def http_transport(
    url: str, headers: dict[str, str], connect_timeout: float, errors: HttpErrors
) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP with ``headers`` on every request; the HTTP client closes with the transport."""
    timeout = httpx2.Timeout(connect_timeout, read=STREAM_READ_TIMEOUT)
    hooks = {"response": [errors.record]}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def transport(
    settings: McpServer, environ: Mapping[str, str], errlog: TextIO | None, http_errors: HttpErrors
) -> Transport:
    """The transport ``settings`` name; a stdio server writes its stderr to ``errlog`` (default: ours),
    a URL server's HTTP error statuses go to ``http_errors``.

    Raises :class:`SetupError` when a ``$NAME`` it uses is not set.
    """
    if settings.url is not None:
        headers = {key: expand(value, environ, f"header {key}") for key, value in settings.headers.items()}
        return http_transport(settings.url, headers, settings.connect_timeout, http_errors)
    return stdio_client(stdio_parameters(settings, environ), errlog=sys.stderr if errlog is None else errlog)


def make_client(
    settings: McpServer,
    environ: Mapping[str, str],
    errlog: TextIO | None,
    http_errors: HttpErrors,
    on_message: MessageHandlerFnT,
) -> Client:
    """An SDK client (not yet entered) for the server; ``on_message`` hears its notifications.

    Protocol negotiation is the SDK's ``auto``: 2026 servers are spoken to in their era, older ones with
    the initialize handshake. Herald keeps its own catalogue, so the SDK's response cache is off.
    """
    return Client(
        transport(settings, environ, errlog, http_errors),
        message_handler=on_message,
        client_info=types.Implementation(name="herald", version=version()),
        cache=None,
    )
