"""MCP servers as processes (stdio): where the process is the point. A server that hangs, crashes or
never starts costs a clear message, never the chat; closing never waits on a process for long.

Each server process takes about a second to start (the SDK's import), so these tests are few.
"""

from __future__ import annotations

import io
import logging
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from agent.mcp import servers
from gateway.doctor.mcp import check_mcp
from gateway.doctor.run import check_config, run_doctor
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.emulator import ProviderEmulator, Reply
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until
from tests.gateway_support import FRIEND, telegram_gateway
from tests.helpers import assert_well_formed, chat_in_terminal, herald_process, point_at, run_turn
from tests.mcp_support import (
    NPX_NOT_FOUND,
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
REPOSITORY = str(Path(__file__).resolve().parents[2])
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
        async with open_agent_runtime(config, home) as runtime:
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
        async with open_agent_runtime(config, home) as runtime:
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
        "npx": {"command": sys.executable, "args": ["-c", f"import sys; sys.exit({NPX_NOT_FOUND!r})"]},
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
    npx = "[FAIL] mcp npx: does not start: its process exited; its last words on stderr:"
    assert f"{npx} {NPX_NOT_FOUND.splitlines()[1]}." in report  # npm's 404, not its update notice


JUNK_LINES = 5000
CHATTY = ["-m", "tests.fakes.mcp_server", "noisy", "300"]


def not_a_server(starts: Path) -> dict[str, object]:
    """A command that is no MCP server: it writes a page of notices to stdout and exits (a wrong
    command, an ``npx`` that prints its notices first), and notes each start in ``starts``."""
    code = (
        "import pathlib, sys\n"
        "with pathlib.Path(sys.argv[1]).open('a') as starts: starts.write('started\\n')\n"
        f"for n in range({JUNK_LINES}): print(f'npm notice {{n}}: a new version is available')\n"
    )
    return {"command": sys.executable, "args": ["-c", code, str(starts)]}


BROKEN_LINE = (
    "MCP server 'broken' did not start (its process exited; it wrote 5,000 lines to stdout that are not "
    "MCP messages (the first: 'npm notice 0: a new version is available')); Herald goes on without its "
    "tools and tries again in {retry:g} s (`herald doctor` checks it)"
)


def lines_counted_as_read(line: str) -> str:
    """``line`` with the count of a server's junk lines as the whole page: a server that exits may be
    seen gone before its last lines are counted (on a loaded machine), which changes nothing else."""
    return re.sub(r"(did not start \(its process exited; it wrote )[\d,]+", rf"\g<1>{JUNK_LINES:,}", line)


CHATTY_LINE = (
    "MCP server 'chatty' runs, but it wrote 300 lines to stdout that are not MCP messages (the first: "
    "'server.js: listening, worker 0 ready'); Herald ignores them. A stdio server may write only MCP "
    "messages to stdout (its logs belong on stderr)"
)


async def test_junk_on_a_servers_stdout_costs_the_gateway_one_line_however_often_it_restarts(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(servers, "RETRY_FIRST", 0.1)  # restarts at 0.1, 0.2, 0.4 s...: no waiting
    starts = tmp_path / "starts"
    mcp = {"servers": {"broken": not_a_server(starts), "chatty": stdio_server(REPOSITORY, args=CHATTY)}}
    emulator.script(Reply(text="Hello."))
    with caplog.at_level(logging.DEBUG):  # every logger, the SDK's too
        async with telegram_gateway(home, emulator, emulator_url, mcp=mcp) as harness:
            await wait_until(
                lambda: starts.exists() and starts.read_text().count("started") >= 4, what="restarts"
            )
            assert catalogue(harness.gateway.services.runtime)[:2] == ["chatty__add", "chatty__add_tool"]
            harness.fake.private_message(FRIEND, "Hi")
            await harness.settled()
            assert harness.texts(FRIEND) == ["Hello."]
    shown = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    # the servers start at once; how many of its lines the exited one's count had read is the machine's
    assert sorted(map(lines_counted_as_read, shown)) == [BROKEN_LINE.format(retry=0.1), CHATTY_LINE]
    assert [record for record in caplog.records if record.name.startswith("mcp")] == []  # the SDK's


def test_herald_chat_q_prints_the_answer_and_one_line_for_a_server_that_writes_junk(
    emulator: ProviderEmulator, served: str, home: HeraldHome, tmp_path: Path
) -> None:
    point_at(home, served)
    config = yaml.safe_load(home.config_path.read_text())
    config["mcp"] = {"servers": {"broken": not_a_server(tmp_path / "starts")}}
    home.config_path.write_text(yaml.safe_dump(config))
    emulator.script(Reply(text="Hello."))
    ran = herald_process(home, "chat", "-q", "Hi")
    assert (ran.returncode, ran.stdout) == (0, "Hello.\n")
    [line] = ran.stderr.splitlines()  # the SDK logged a ten-line traceback for each of the 5,000
    assert lines_counted_as_read(line).endswith(" WARNING agent.mcp.servers: " + BROKEN_LINE.format(retry=30))


async def test_doctor_and_the_terminal_chat_say_it_in_one_line_too(
    emulator: ProviderEmulator,
    emulator_url: str,
    home: HeraldHome,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    chatty = stdio_server(REPOSITORY, args=CHATTY)
    mcp = {"servers": {"broken": not_a_server(tmp_path / "starts"), "chatty": chatty}}
    config = yaml.safe_load(home.config_path.read_text()) or {}
    home.config_path.write_text(yaml.safe_dump({**config, "mcp": mcp}))
    out = io.StringIO()
    with caplog.at_level(logging.DEBUG):
        code = await run_doctor(home, offline=True, out=out, checks=[check_config, check_mcp])
        doctor_records = len(caplog.records)
        emulator.script(Reply(text="Hello."))
        chat = await chat_in_terminal(with_servers(emulator_url, **mcp["servers"]), home, "Hi", "/quit")
    report = out.getvalue()
    assert code == 1
    assert (
        "[FAIL] mcp broken: does not start: its process exited; it wrote 5,000 lines to stdout that are not "
        "MCP messages (the first: 'npm notice 0: a new version is available'). Fix mcp.servers.broken in "
        "config.yaml.\n"
    ) in report
    assert (
        "[warn] mcp chatty: 8 tools, but it wrote 300 lines to stdout that are not MCP messages (the first: "
        "'server.js: listening, worker 0 ready'): Herald ignores them, and a stdio server should write only "
        "MCP messages to stdout (its logs on stderr).\n"
    ) in report
    assert doctor_records == 0  # its findings are the report
    assert chat.code == 0 and "Hello." in chat.out
    shown = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert sorted(shown) == [BROKEN_LINE.format(retry=30), CHATTY_LINE]  # the servers start at once
    assert [record for record in caplog.records if record.name.startswith("mcp")] == []
