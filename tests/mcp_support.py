"""Helpers for the MCP tests: a config with servers, what the model was answered, waiting for a catalogue."""

from __future__ import annotations

import sys
from typing import Any

from agent.store import SessionRecord
from gateway.config import HeraldConfig
from gateway.wiring.runtime import Runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply, ToolUse
from tests.fakes.waiting import wait_until
from tests.helpers import SPEC, run_turn

STDIO_SERVER = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server"]}
# What `npx -y @modelcontextprotocol/server-nope` writes to stderr (npm 10): npm's update notice comes last.
NPX_NOT_FOUND = """\
npm error code E404
npm error 404 Not Found - GET https://registry.npmjs.org/@modelcontextprotocol%2fserver-nope - Not found
npm error 404
npm error 404  '@modelcontextprotocol/server-nope@*' is not in this registry.
npm error 404
npm error 404 Note that you can also install from a
npm error 404 tarball, folder, http url, or git url.
npm error A complete log of this run can be found in: /home/bot/.npm/_logs/2025-03-01-debug-0.log
npm notice
npm notice New major version of npm available! 10.8.2 -> 11.1.0
npm notice Changelog: https://github.com/npm/cli/releases/tag/v11.1.0
npm notice To update run: npm install -g npm@11.1.0
npm notice
"""


def with_servers(emulator_url: str, **servers: dict[str, Any]) -> HeraldConfig:
    """A config pointed at the emulator with ``servers`` as ``mcp.servers``."""
    return make_config(emulator_url, mcp={"servers": servers})


def stdio_server(cwd: str, **settings: Any) -> dict[str, Any]:
    """The test server as a stdio process (run from the repository, where ``tests`` is importable)."""
    return {**STDIO_SERVER, "cwd": cwd, **settings}


def mcp_names(tools: list[dict[str, Any]]) -> list[str]:
    return [tool["name"] for tool in tools if "__" in tool["name"]]


def catalogue(runtime: Runtime) -> list[str]:
    """The MCP tools a new owner session would get now."""
    return [tool.name for tool in runtime.registry.enabled(["mcp"])]


async def wait_for_catalogue(runtime: Runtime, present: str | None = None, absent: str | None = None) -> None:
    """Until the catalogue has ``present`` and lacks ``absent`` (a server re-lists after a change)."""
    await wait_until(
        lambda: (present is None or present in catalogue(runtime)) and absent not in catalogue(runtime),
        what=f"the catalogue with {present or 'nothing new'} and without {absent or 'nothing'}",
        describe=lambda: f"the catalogue: {catalogue(runtime)}",
    )


async def stored(runtime: Runtime, session_id: str) -> SessionRecord:
    session = await runtime.store.sessions.get(session_id)
    assert session is not None
    return session


async def call_through_the_model(
    runtime: Runtime, emulator: ProviderEmulator, session_id: str, tool: str, arguments: dict[str, Any]
) -> tuple[str, bool]:
    """One turn in which the model calls ``tool``; what the model was sent back (text, is_error)."""
    session = await stored(runtime, session_id)
    emulator.script(Reply(tool_calls=[ToolUse(tool, arguments)]), Reply(text="Done."))
    result = await run_turn(runtime, session, f"Please use {tool}.")
    assert result.error is None, result.error
    block = next(
        b for b in emulator.requests[-1].json["messages"][-1]["content"] if b["type"] == "tool_result"
    )
    return block["content"], bool(block.get("is_error"))


async def owner_session(runtime: Runtime) -> str:
    return (await runtime.new_session(SPEC)).record.id
