"""MCP servers as processes (stdio): where the process is the point. A server that hangs, crashes or
never starts costs a clear message, never the chat; closing never waits on a process for long.

Each server process takes about a second to start (the SDK's import), so these tests are few.
"""

from __future__ import annotations

import io
import logging
import sys
import time
from pathlib import Path

import pytest
import yaml

from agent.mcp import servers
from gateway.doctor import check_config, run_doctor
from gateway.doctor_mcp import check_mcp
from gateway.home import HeraldHome
from gateway.runtime import open_runtime
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import WAIT_TIMEOUT
from tests.helpers import assert_well_formed, run_turn
from tests.mcp_support import (
    call_through_the_model,
    catalogue,
    mcp_names,
    owner_session,
    stdio_server,
    stored,
    wait_for_catalogue,
    with_servers,
)

pytestmark = pytest.mark.slow  # server processes start, crash and start again
REPOSITORY = str(Path(__file__).resolve().parent.parent)
SKIPPED = "; Herald goes on without its tools and tries again in 30 s (`herald doctor` checks it)"
# Closing gives a server 2 s to exit after its stdin closes, then signals it: never the hour a hung one
# would take (a bound generous enough for a loaded machine).
CLOSE_WITHIN = WAIT_TIMEOUT


async def test_a_stdio_server_answers_times_out_crashes_and_comes_back_without_ending_the_chat(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(servers, "RETRY_FIRST", 2.0)  # instead of 30 s
    config = with_servers(emulator_url, local=stdio_server(REPOSITORY, timeout=5.0))
    with caplog.at_level(logging.INFO, logger="agent.mcp"):
        async with open_runtime(config, home) as runtime:
            session = await owner_session(runtime)
            assert mcp_names((await stored(runtime, session)).tools) == [
                "local__add",
                "local__add_tool",
                "local__crash",
                "local__echo",
                "local__fail",
                "local__picture",
                "local__remove_tool",
                "local__slow",
            ]
            text, is_error = await call_through_the_model(
                runtime, emulator, session, "local__echo", {"text": "a"}
            )
            assert not is_error and text.startswith('<untrusted source="MCP server local, tool echo">')
            assert "\necho: a\n" in text

            text, is_error = await call_through_the_model(
                runtime, emulator, session, "local__slow", {"seconds": 3600}
            )
            assert (is_error, text) == (
                True,
                "The MCP server 'local' did not answer local__slow within 5 s; the call was abandoned.",
            )
            text, is_error = await call_through_the_model(
                runtime, emulator, session, "local__echo", {"text": "b"}
            )
            assert not is_error and "echo: b" in text

            text, is_error = await call_through_the_model(runtime, emulator, session, "local__crash", {})
            assert (is_error, text) == (
                True,
                "The MCP server 'local' stopped during the call to local__crash (its process exited); its "
                "tools are unavailable for now.",
            )
            emulator.script(Reply(text="Still here."))
            after = await run_turn(runtime, await stored(runtime, session), "Are you there?")
            assert (after.error, after.text) == (None, "Still here.")
            text, is_error = await call_through_the_model(
                runtime, emulator, session, "local__echo", {"text": "c"}
            )
            assert (is_error, text) == (
                True,
                "The tool local__echo is not available now: the MCP server 'local' is not running (its "
                "process exited).",
            )
            assert catalogue(runtime) == []  # new sessions do not get a stopped server's tools
            for request in emulator.requests:
                assert_well_formed(request)  # every call got its result: nothing was left half-way

            await wait_for_catalogue(runtime, present="local__echo")  # started again
            text, is_error = await call_through_the_model(
                runtime, emulator, session, "local__echo", {"text": "d"}
            )
            assert not is_error and "echo: d" in text
            closing = time.monotonic()
        assert time.monotonic() - closing < CLOSE_WITHIN
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.INFO] == [
        "MCP server 'local' stopped (its process exited); Herald tries to start it again in 2 s",
        "MCP server 'local' runs again; new sessions get its tools",
    ]


async def test_servers_that_cannot_start_or_hang_are_skipped_with_one_line_each(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    config = with_servers(
        emulator_url,
        missing={"command": "/nonexistent/mcp-server"},
        quits={"command": sys.executable, "args": ["-c", "import sys; sys.exit('no config file found')"]},
        hangs={"command": "sleep", "args": ["3600"], "connect_timeout": 0.5},
    )
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agent.mcp"):
        async with open_runtime(config, home) as runtime:
            started = time.monotonic() - began
            session = await owner_session(runtime)
            emulator.script(Reply(text="Hello."))
            result = await run_turn(runtime, await stored(runtime, session), "Hi")
            assert (result.error, result.text) == (None, "Hello.")
            assert catalogue(runtime) == []
    assert started < WAIT_TIMEOUT  # connect_timeout and the grace for reporting it, not the process's end
    assert time.monotonic() - began < CLOSE_WITHIN
    assert sorted(record.getMessage() for record in caplog.records) == [
        f"MCP server 'hangs' did not start (did not start within 0.5 s){SKIPPED}",
        f"MCP server 'missing' did not start (cannot run '/nonexistent/mcp-server': No such file or "
        f"directory){SKIPPED}",
        f"MCP server 'quits' did not start (its process exited; its last words on stderr: no config file "
        f"found){SKIPPED}",
    ]
    assert all(record.exc_info is None for record in caplog.records)


async def test_doctor_starts_stdio_servers_even_offline_and_says_why_one_does_not_start(
    home: HeraldHome,
) -> None:
    servers = {
        "local": stdio_server(REPOSITORY, deny=["crash"]),
        "missing": {"command": "/nonexistent/mcp-server", "env": {"API_KEY": "$MISSING_KEY"}},
        "quits": {"command": sys.executable, "args": ["-c", "import sys; sys.exit('no config file found')"]},
    }
    home.config_path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    out = io.StringIO()
    code = await run_doctor(home, offline=True, out=out, checks=[check_config, check_mcp])
    report = out.getvalue()
    assert code == 1
    assert "[ok]   mcp local: started; 7 of its 8 tools offered.\n" in report
    assert (
        "[FAIL] mcp missing: does not start: the environment variable MISSING_KEY (env API_KEY) is not set. "
        "Fix mcp.servers.missing in config.yaml.\n"
    ) in report
    quits = "[FAIL] mcp quits: does not start: its process exited; its last words on stderr: no config file"
    assert f"{quits} found." in report
