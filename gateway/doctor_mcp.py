"""``herald doctor``'s MCP check: does each configured server start, within its ``connect_timeout``, and
list its tools?

One finding per server, all checked at once. A stdio server is a local program, so it is checked even
with ``--offline``; a URL server is skipped then. Nothing of ``env`` or ``headers`` is printed (they
may hold secrets): a missing variable is named, never a value.
"""

from __future__ import annotations

import asyncio

from agent.mcp.connection import StartFailed, connect
from agent.mcp.tools import offered
from agent.settings import McpServer
from gateway.doctor import DoctorContext, Finding


async def check_mcp(ctx: DoctorContext) -> list[Finding]:
    """Start each server of ``mcp.servers`` the way Herald does, list its tools, close it."""
    if ctx.config is None:
        return [Finding("skip", "mcp", "not checked: config.yaml is invalid (see above).")]
    servers = ctx.config.mcp.servers
    if servers and "mcp" not in ctx.config.agent.toolsets:
        return [
            Finding("skip", "mcp", "servers are configured, but the mcp tool set is off (agent.toolsets).")
        ]
    return list(await asyncio.gather(*(check_server(ctx, name, server) for name, server in servers.items())))


async def check_server(ctx: DoctorContext, name: str, settings: McpServer) -> Finding:
    subject = f"mcp {name}"
    if not settings.enabled:
        return Finding("skip", subject, "disabled (enabled: false).")
    if settings.url is not None and ctx.offline:
        return Finding("skip", subject, "a URL server; not checked (--offline).")
    try:
        async with connect(name, settings, ctx.environ) as connection:
            listed = connection.tools
            stray = connection.stdout.reason()
    except StartFailed as failure:
        return Finding(
            "fail", subject, f"does not start: {failure.reason}. Fix mcp.servers.{name} in config.yaml."
        )
    names = {tool.name for tool in listed}
    unknown = sorted({*settings.allow, *settings.deny} - names)
    count = len(offered(settings, listed))
    text = f"started; {count} of its {len(names)} tools offered" if count != len(names) else f"{count} tools"
    if unknown:
        return Finding(
            "warn", subject, f"{text}; allow/deny name tools it does not have: {', '.join(unknown)}."
        )
    if stray:
        return Finding(
            "warn",
            subject,
            f"{text}, but {stray}: Herald ignores them, and a stdio server should write only MCP messages "
            "to stdout (its logs on stderr).",
        )
    return Finding("ok", subject, f"{text}.")
