"""MCP servers over streamable HTTP (the test server on 127.0.0.1, in this event loop) through the whole
agent: the model calls their tools as ``server__tool``, sessions keep the tool list they started with.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from agent.memory import chat_scope
from agent.session import SessionSpec
from gateway.doctor.mcp import check_mcp
from gateway.doctor.run import check_config, check_keys, run_doctor
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.mcp_server import serve_http
from tests.fakes.waiting import PROCESS_TIMEOUT
from tests.helpers import assert_well_formed, run_turn
from tests.mcp_support import (
    call_through_the_model,
    catalogue,
    mcp_names,
    owner_session,
    stored,
    wait_for_catalogue,
    with_servers,
)

NOTHING_LISTENS = "http://127.0.0.1:9/mcp"  # the discard port
REPOSITORY = str(Path(__file__).resolve().parents[2])  # where ``tests`` is importable


@pytest.fixture
async def mcp_url() -> AsyncIterator[str]:
    async with serve_http() as url:
        yield url


@pytest.fixture
async def refusing_url() -> AsyncIterator[str]:
    """An endpoint that answers every request with HTTP 401 (a wrong or missing token)."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=401, text="Unauthorized")

    app = web.Application()
    app.router.add_route("*", "/mcp", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/mcp"
    await runner.cleanup()


async def test_a_new_session_stores_the_servers_tools_namespaced_in_a_fixed_order(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, mcp_url: str
) -> None:
    config = with_servers(emulator_url, web={"url": mcp_url}, calc={"url": mcp_url, "allow": ["add", "echo"]})
    async with open_agent_runtime(config, home) as runtime:
        first = (await runtime.new_session(SessionSpec("a", "test", "terminal", "owner"))).record
        second = (await runtime.new_session(SessionSpec("b", "test", "terminal", "owner"))).record
    names = [tool["name"] for tool in first.tools]
    assert names == sorted(names)
    assert mcp_names(first.tools) == [
        "calc__add",
        "calc__echo",
        "web__add",
        "web__add_tool",
        "web__echo",
        "web__fail",
        "web__picture",
        "web__remove_tool",
        "web__slow",
        "web__whoami",
    ]
    assert {"memory", "todo"} <= set(names)  # next to Herald's own tools
    echo = next(tool for tool in first.tools if tool["name"] == "web__echo")
    assert echo["description"] == "Repeat the text."
    assert list(echo["input_schema"]) == ["type", "properties", "required", "title"]  # the server's key order
    assert first.tools_json == second.tools_json  # same catalogue, same bytes (cache invariant 4)


async def test_the_model_calls_a_tool_and_reads_its_answer_as_untrusted_content(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, mcp_url: str
) -> None:
    async with open_agent_runtime(with_servers(emulator_url, web={"url": mcp_url}), home) as runtime:
        session = await owner_session(runtime)
        text, is_error = await call_through_the_model(
            runtime, emulator, session, "web__echo", {"text": "hello"}
        )
        assert not is_error
        assert text.startswith('<untrusted source="MCP server web, tool echo">\n[Content from MCP server web')
        assert "\necho: hello\n</untrusted>" in text
        picture, _ = await call_through_the_model(runtime, emulator, session, "web__picture", {})
        assert "A red pixel:\n[image: image/png, 70 bytes; not shown]\n[resource link: pixel.png" in picture
        failure, is_error = await call_through_the_model(
            runtime, emulator, session, "web__fail", {"reason": "no"}
        )
        assert is_error and "cannot do that: no" in failure and failure.startswith("<untrusted")
    assert len({request.tools_json for request in emulator.requests}) == 1


async def test_allow_and_deny_choose_which_of_a_server_s_tools_the_model_gets(
    emulator_url: str, home: HeraldHome, mcp_url: str
) -> None:
    config = with_servers(
        emulator_url,
        only={"url": mcp_url, "allow": ["echo", "add", "slow"], "deny": ["slow"]},
        most={"url": mcp_url, "deny": ["add_tool", "remove_tool", "whoami"]},
    )
    async with open_agent_runtime(config, home) as runtime:
        assert catalogue(runtime) == [
            "most__add",
            "most__echo",
            "most__fail",
            "most__picture",
            "most__slow",
            "only__add",
            "only__echo",
        ]


async def test_a_changed_tool_list_reaches_new_sessions_only_and_a_removed_tool_answers_clearly(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, mcp_url: str
) -> None:
    async with open_agent_runtime(with_servers(emulator_url, web={"url": mcp_url}), home) as runtime:
        older = await owner_session(runtime)
        started_with = (await stored(runtime, older)).tools_json
        await call_through_the_model(runtime, emulator, older, "web__add_tool", {"name": "late"})
        await wait_for_catalogue(runtime, present="web__late")

        newer = await owner_session(runtime)
        assert "web__late" in mcp_names((await stored(runtime, newer)).tools)
        assert (await stored(runtime, older)).tools_json == started_with
        text, is_error = await call_through_the_model(runtime, emulator, newer, "web__late", {"text": "hi"})
        assert not is_error and "extra: hi" in text

        # the older session still sends the tool list it started with, and cannot use the new tool
        text, is_error = await call_through_the_model(runtime, emulator, older, "web__late", {"text": "hi"})
        assert is_error and text.startswith("Unknown tool 'web__late'")
        assert emulator.requests[-1].tools_json == emulator.requests[0].tools_json

        await call_through_the_model(runtime, emulator, older, "web__remove_tool", {"name": "late"})
        await wait_for_catalogue(runtime, absent="web__late")
        text, is_error = await call_through_the_model(runtime, emulator, newer, "web__late", {"text": "hi"})
        assert is_error
        assert text == "The tool web__late is no longer available: the MCP server 'web' removed it."


async def test_a_2025_era_server_s_change_notification_is_heard_too(
    emulator_url: str, home: HeraldHome
) -> None:
    async with (
        serve_http(legacy=True) as url,
        open_agent_runtime(with_servers(emulator_url, old={"url": url}), home) as runtime,
    ):
        tool = runtime.registry.get("old__add_tool")
        assert tool is not None
        await tool.handler({"name": "later"}, None)  # type: ignore[arg-type]
        await wait_for_catalogue(runtime, present="old__later")


async def test_a_call_that_outlasts_its_timeout_answers_so_and_the_chat_goes_on(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, mcp_url: str
) -> None:
    async with open_agent_runtime(
        with_servers(emulator_url, web={"url": mcp_url, "timeout": 0.5}), home
    ) as runtime:
        session = await owner_session(runtime)
        text, is_error = await call_through_the_model(
            runtime, emulator, session, "web__slow", {"seconds": 30}
        )
        assert is_error
        assert text == "The MCP server 'web' did not answer web__slow within 0.5 s; the call was abandoned."
        text, is_error = await call_through_the_model(
            runtime, emulator, session, "web__echo", {"text": "next"}
        )
        assert not is_error and "echo: next" in text


async def test_headers_carry_secrets_from_the_environment(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    mcp_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEB_TOKEN", "s3cret-token")
    config = with_servers(
        emulator_url, web={"url": mcp_url, "headers": {"Authorization": "Bearer $WEB_TOKEN"}}
    )
    async with open_agent_runtime(config, home) as runtime:
        session = await owner_session(runtime)
        text, _ = await call_through_the_model(runtime, emulator, session, "web__whoami", {})
    assert "authorization: Bearer s3cret-token" in text


async def test_a_server_that_is_not_there_is_logged_once_and_herald_starts_without_it(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    mcp_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = with_servers(emulator_url, gone={"url": NOTHING_LISTENS}, web={"url": mcp_url})
    with caplog.at_level(logging.WARNING, logger="agent.mcp"):
        async with open_agent_runtime(config, home) as runtime:
            session = await owner_session(runtime)
            assert mcp_names((await stored(runtime, session)).tools)[0] == "web__add"
            assert not any(name.startswith("gone__") for name in catalogue(runtime))
            _, is_error = await call_through_the_model(
                runtime, emulator, session, "web__echo", {"text": "hi"}
            )
            assert not is_error
    lines = [record for record in caplog.records if "gone" in record.getMessage()]
    assert [record.getMessage() for record in lines] == [
        "MCP server 'gone' did not start (cannot reach its URL (All connection attempts failed)); Herald "
        "goes on without its tools and tries again in 30 s (`herald doctor` checks it)"
    ]
    assert lines[0].exc_info is None


async def test_groups_and_guests_get_no_mcp_tools_by_default(
    emulator_url: str, home: HeraldHome, mcp_url: str
) -> None:
    group = SessionSpec(
        "telegram:group:-100", "telegram", "telegram", chat_scope("telegram", "-100"), chat_id="-100"
    )
    async with open_agent_runtime(with_servers(emulator_url, web={"url": mcp_url}), home) as runtime:
        owner = (await runtime.new_session(SessionSpec("cli", "cli", "terminal", "owner"))).record
        guests = (await runtime.new_session(group)).record
    assert mcp_names(owner.tools)
    assert mcp_names(guests.tools) == []
    assert {"memory", "todo"} <= {tool["name"] for tool in guests.tools}


async def test_doctor_reports_each_server_without_printing_secrets(
    home: HeraldHome, mcp_url: str, refusing_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEB_TOKEN", "s3cret-token")
    servers = {
        "web": {"url": mcp_url, "headers": {"Authorization": "Bearer $WEB_TOKEN"}},
        "some": {"url": mcp_url, "allow": ["echo", "add", "ech0"]},
        "gone": {"url": NOTHING_LISTENS, "connect_timeout": 3},
        "keyless": {"url": mcp_url, "headers": {"X-Key": "$NOT_SET_ANYWHERE"}},
        "locked": {"url": refusing_url, "headers": {"Authorization": "Bearer $WEB_TOKEN"}},
        "off": {"url": mcp_url, "enabled": False},
    }
    home.config_path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))

    async def doctor(offline: bool) -> str:
        out = io.StringIO()
        await run_doctor(home, offline=offline, out=out, checks=[check_config, check_keys, check_mcp])
        return out.getvalue()

    report = await doctor(offline=False)
    assert "[ok]   mcp web: 8 tools.\n" in report
    assert (
        "[warn] mcp some: started; 2 of its 8 tools offered; allow/deny name tools it does not have: ech0.\n"
        in report
    )
    assert (
        "[FAIL] mcp gone: does not start: cannot reach its URL (All connection attempts failed). "
        "Fix mcp.servers.gone in config.yaml.\n"
    ) in report
    assert (
        "[FAIL] mcp keyless: does not start: the environment variable NOT_SET_ANYWHERE (header X-Key)"
        in report
    )
    assert (
        "[FAIL] mcp locked: does not start: its URL answered HTTP 401: check its headers (the token). "
        "Fix mcp.servers.locked in config.yaml.\n"
    ) in report
    assert "[skip] mcp off: disabled (enabled: false).\n" in report
    assert "s3cret-token" not in report
    offline = await doctor(offline=True)
    assert "[skip] mcp web: a URL server; not checked (--offline).\n" in offline
    assert json.dumps(servers)  # the config itself is untouched by doctor


async def test_with_the_mcp_tool_set_off_no_server_starts_and_doctor_says_why(
    emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    servers = {"files": {"command": "/nonexistent/mcp-server"}}
    toolsets = ["memory", "todo"]
    config = make_config(emulator_url, mcp={"servers": servers}, agent={"toolsets": toolsets})
    with caplog.at_level(logging.WARNING, logger="agent.mcp"):
        async with open_agent_runtime(config, home) as runtime:
            assert runtime.mcp is None  # nothing started, not even the SDK loaded
    assert caplog.records == []
    home.config_path.write_text(
        yaml.safe_dump({"mcp": {"servers": servers}, "agent": {"toolsets": toolsets}})
    )
    out = io.StringIO()
    await run_doctor(home, offline=True, out=out, checks=[check_config, check_mcp])
    assert (
        "[skip] mcp: servers are configured, but the mcp tool set is off (agent.toolsets).\n"
        in out.getvalue()
    )


@pytest.fixture
async def mortal_url() -> AsyncIterator[str]:
    """The test server over HTTP in a process of its own (its ``crash`` tool ends that process)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.mcp_server", "http", stdout=asyncio.subprocess.PIPE, cwd=REPOSITORY
    )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(PROCESS_TIMEOUT):  # its first line: the URL, once it listens
            url = (await process.stdout.readline()).decode().strip()
        yield url
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def test_an_http_server_that_dies_in_the_middle_of_a_call_costs_a_clear_result_not_the_chat(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, mortal_url: str
) -> None:
    async with open_agent_runtime(
        with_servers(emulator_url, web={"url": mortal_url, "timeout": 10}), home
    ) as runtime:
        session = await owner_session(runtime)
        text, is_error = await call_through_the_model(runtime, emulator, session, "web__crash", {})
        assert is_error
        assert text == (
            "The MCP server 'web' stopped during the call to web__crash (it closed the connection); its "
            "tools are unavailable for now."
        )
        text, is_error = await call_through_the_model(runtime, emulator, session, "web__echo", {"text": "x"})
        assert is_error and text.startswith(
            "The tool web__echo is not available now: the MCP server 'web' is not"
        )
        emulator.script(Reply(text="Still here."))
        after = await run_turn(runtime, await stored(runtime, session), "Are you there?")
        assert (after.error, after.text) == (None, "Still here.")
        for request in emulator.requests:
            assert_well_formed(request)  # every call got its result
