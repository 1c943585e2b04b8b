"""What a failing tool tells the model names nothing of Herald's own: no file or folder of its home, no
database URL or host, no command, address or stderr line from its configuration and servers. Issue 19:
``skill_view`` of an unknown name told the model "looked in the database
postgresql://herald:***@localhost/herald2".

Every tool's error paths run through the model (the emulator calls the tool, the answer is what the
next request carries), on SQLite (the home's files) and on PostgreSQL (a database URL).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent.memory import OWNER_SCOPE
from agent.memory.files import FileMemoryDocuments
from agent.model.messages import ToolCall
from agent.skills.files import DiskSkillTree
from agent.skills.library import Bundle
from agent.tools.delegate import format_outcomes
from agent.tools.registry import SideOutcome, run_tool
from gateway.config import HeraldConfig
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator
from tests.mcp_support import call_through_the_model, owner_session, stdio_server
from tests.postgres import PostgresServer

REPOSITORY = str(Path(__file__).resolve().parents[2])
SEARCH_URL = "http://127.0.0.1:9"  # the discard port: nothing answers
LAST_WORDS = "fatal: cannot open /srv/notes/notes.db"


def tool_config(emulator_url: str, **sections: object) -> HeraldConfig:
    return make_config(
        emulator_url,
        mcp={"servers": {"local": stdio_server(REPOSITORY, timeout=5.0)}},
        web={"search": {"provider": "searxng", "searxng_url": SEARCH_URL}},
        **sections,  # type: ignore[arg-type]
    )


def internal(home: HeraldHome, config: HeraldConfig) -> list[str]:
    """What the model must never read: the test's folder (the home and the working directory), the
    database's URL, host, port and name, the search service's address, a server's stderr."""
    words = [str(home.root.parent), str(home.root.parent.resolve()), SEARCH_URL, "127.0.0.1:9", "/srv/notes"]
    url = config.storage.url and os.path.expandvars(config.storage.url)
    if url:
        parts = urlsplit(url)
        words += [url, f"{parts.hostname}:{parts.port}", parts.path.strip("/"), "postgresql://"]
        words += [parts.hostname or "", str(parts.port)]
    return [word for word in words if word]


async def outcome(
    runtime: Runtime, emulator: ProviderEmulator, session: str, tool: str, arguments: dict[str, object]
) -> str:
    """What the model read after calling ``tool``: an error result."""
    text, is_error = await call_through_the_model(runtime, emulator, session, tool, arguments)
    assert is_error, f"{tool} {arguments} did not fail: {text}"
    return text


@pytest.mark.timeout(120)
async def test_no_tool_error_names_a_path_a_database_or_an_address(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = tool_config(emulator_url)
    answers: dict[str, str] = {}
    async with open_agent_runtime(config, home) as runtime:
        session = await owner_session(runtime)

        async def called(tool: str, **arguments: object) -> str:
            return await outcome(runtime, emulator, session, tool, arguments)

        answers["skill_view, no skills"] = await called("skill_view", name="deploy")
        await runtime.skills.install([Bundle("ops/deploy", {"SKILL.md": SKILL}, "test")])
        answers["skill_view, unknown"] = await called("skill_view", name="nope")
        answers["skill_view, no such file"] = await called("skill_view", name="deploy", path="notes.md")
        answers["skill_view, absolute"] = await called("skill_view", name="deploy", path="/etc/passwd")
        answers["skill_view, outside"] = await called("skill_view", name="deploy", path="../x")
        if isinstance(runtime.skills.tree, DiskSkillTree):  # a loop of links: the OS error names the path
            folder = runtime.skills.tree.root / "ops/deploy"
            (folder / "loop").symlink_to(folder / "loop")
            answers["skill_view, unreadable"] = await called("skill_view", name="deploy", path="loop")
        if isinstance(runtime.memory.documents, FileMemoryDocuments):  # a hand-edited file
            runtime.memory.documents.path(OWNER_SCOPE, "memory").write_bytes(b"caf\xe9\n")
            answers["memory, not UTF-8"] = await called("memory", action="read", target="memory")
        answers["memory, too long"] = await called("memory", action="add", target="user", content="x" * 9000)
        answers["memory, no such entry"] = await called(
            "memory", action="remove", target="user", old_text="never written"
        )
        answers["session_search"] = await called("session_search", query="")
        answers["todo"] = await called("todo", todos=[{"id": "1"}])
        answers["delegate"] = await called("delegate", tasks=[])
        answers["cron"] = await called("cron", action="pause", job_id="nope")
        answers["web_search"] = await called("web_search", query="weather")
        answers["mcp, stops"] = await called("local__crash", last_words=LAST_WORDS)
        answers["mcp, not running"] = await called("local__echo", text="hi")
    words = internal(home, config)
    leaks = {name: [w for w in words if w in text] for name, text in answers.items()}
    assert {name: found for name, found in leaks.items() if found} == {}, answers
    assert answers["skill_view, no skills"] == "Unknown skill 'deploy': no skills are installed."
    assert answers["mcp, stops"] == (
        "The MCP server 'local' stopped during the call to local__crash (its process exited); its tools "
        "are unavailable for now."
    )
    assert answers["mcp, not running"] == (
        "The tool local__echo is not available now: the MCP server 'local' is not running (its process "
        "exited)."
    )
    assert answers["web_search"] == "Search failed: could not reach SearXNG; try again later."
    if "skill_view, unreadable" in answers:
        assert answers["skill_view, unreadable"] == (
            "Tool 'skill_view' failed unexpectedly (RuntimeError); the details are in Herald's log."
        )
        assert answers["memory, not UTF-8"] == (
            "MEMORY.md is not UTF-8 text, so it cannot be read or edited; the owner can fix it (the log "
            "says where it is)."
        )


SKILL = b"---\nname: deploy\ndescription: Ship a release.\n---\n\nRun the release script.\n"


@pytest.mark.own_database  # a PostgreSQL of its own, stopped
@pytest.mark.timeout(120)
async def test_with_the_database_down_tools_say_so_without_naming_it(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, own_postgres: PostgresServer
) -> None:
    """A turn cannot run without its database (it stores every message), so the calls are made as the
    tool loop makes them, with the session's tool context, once the database is gone."""
    config = tool_config(emulator_url, storage={"url": own_postgres.new_database()})
    calls = [
        ("memory", {"action": "read", "target": "memory"}),
        ("skills_list", {}),
        ("skill_view", {"name": "deploy"}),
        ("session_search", {"query": "release"}),
        ("cron", {"action": "list"}),
    ]
    async with open_agent_runtime(config, home) as runtime:
        session = await runtime.store.sessions.get(await owner_session(runtime))
        assert session is not None
        context = runtime.agent.tool_context(session, depth=0)
        own_postgres.halt()
        try:
            answers = [
                await run_tool(runtime.registry, ToolCall(f"c{n}", tool, json.dumps(args)), context, {tool})
                for n, (tool, args) in enumerate(calls)
            ]
        finally:
            own_postgres.resume()
    assert [(answer.content, answer.is_error) for answer in answers] == [
        (f"Tool '{tool}' could not be run: Herald's database cannot be used now; try again later.", True)
        for tool, _ in calls
    ]


def test_a_sub_agents_failure_reaches_the_model_without_the_addresses_it_names() -> None:
    hint = (
        "The model provider rejected the request: Not Found (the endpoint http://10.0.0.7:8000 has no /v1 in "
        "its path; try OPENAI_BASE_URL=http://10.0.0.7:8000/v1 (or model.base_url))"
    )
    text = format_outcomes([SideOutcome("", hint, 10, 0, 0)])
    assert "ended early: The model provider rejected the request: Not Found (the endpoint" in text
    assert "10.0.0.7" not in text
