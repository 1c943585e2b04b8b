"""Small things a user meets at the command line, each one a test that failed before."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from gateway.home import HeraldHome
from gateway.runtime import open_runtime
from gateway.terminal import interactive
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.helpers import ChatResponder, is_summary_request, point_at


def lines_of(*lines: str):
    queue = iter(lines)

    async def read(prompt: str) -> str:
        return next(queue)

    return read


async def test_text_that_starts_with_a_slash_but_is_no_command_goes_to_the_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    out = io.StringIO()
    emulator.script(Reply(text="Check its permissions."))
    async with open_runtime(make_config(emulator_url), home) as runtime:
        read = lines_of("/etc/hosts is broken", "/bogus", "/quit")
        await interactive(runtime, resume=False, out=out, err=io.StringIO(), read=read)
    assert "Check its permissions." in out.getvalue()
    assert "Unknown command /bogus." in out.getvalue()
    [request] = emulator.requests
    assert request.json["messages"][-1]["content"][0]["text"] == "/etc/hosts is broken"


def test_dash_reads_the_query_from_stdin(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    point_at(home, served)
    monkeypatch.setattr(sys, "stdin", io.StringIO("a question\nover two lines\n"))
    emulator.script(Reply(text="Read it."))
    result = herald("chat", "-q", "-")
    assert (result.returncode, result.stdout) == (0, "Read it.\n"), result.stderr
    assert emulator.requests[-1].json["messages"][-1]["content"][0]["text"] == "a question\nover two lines\n"


def test_an_empty_model_name_is_refused(home: HeraldHome, herald) -> None:
    result = herald("chat", "--model", "", "-q", "hi")
    assert result.returncode == 2 and "argument --model: must not be empty" in result.stderr


def test_verbose_works_anywhere_on_the_line(home: HeraldHome, herald) -> None:
    for args in (("-v", "config", "get", "model.name"), ("config", "get", "model.name", "-v")):
        logging.getLogger("agent").setLevel(logging.WARNING)
        result = herald(*args)
        assert (result.returncode, result.stdout) == (0, "claude-sonnet-4-6\n"), result.stderr
        assert logging.getLogger("agent").level == logging.DEBUG


def test_version(herald) -> None:
    result = herald("--version")
    assert result.returncode == 0 and result.stdout.startswith("herald ")


def test_an_openai_base_url_without_v1_gets_a_hint(
    served: str, home: HeraldHome, herald, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", served)
    result = herald("chat", "-q", "hi", "--provider", "openai", "--model", "gpt-5")
    assert result.returncode == 1
    assert "has no /v1 in its path" in result.stderr and f"OPENAI_BASE_URL={served}/v1" in result.stderr


async def test_retry_notices_stay_out_of_the_conversation(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome, caplog: pytest.LogCaptureFixture
) -> None:
    out, err = io.StringIO(), io.StringIO()
    emulator.fail_next(529)
    emulator.script(Reply(text="The answer."))
    with caplog.at_level(logging.WARNING):
        async with open_runtime(make_config(emulator_url), home) as runtime:
            await interactive(runtime, resume=False, out=out, err=err, read=lines_of("hello", "/quit"))
    assert "provider error" not in out.getvalue() and out.getvalue().count("The answer.") == 1
    assert err.getvalue().count("[provider error: ") == 1 and "retry 1 in" in err.getvalue()
    assert "retry 1/3" not in caplog.text  # said once, to the user, not again by the log


async def test_a_second_compress_with_nothing_new_makes_no_model_call(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=300)
    turns = [f"Question {i}: FACT-{i} " + "tell me more. " * 10 for i in range(8)]
    out = io.StringIO()
    config = make_config(emulator_url, compression={"protect_last_n": 4})
    async with open_runtime(config, home) as runtime:
        read = lines_of(*turns, "/compress", "/compress", "/quit")
        await interactive(runtime, resume=False, out=out, err=io.StringIO(), read=read)
    assert "Compressed (summary)" in out.getvalue()
    assert out.getvalue().rstrip().endswith("Nothing to compress: the conversation is as short as it gets.")
    assert len([r for r in emulator.requests if is_summary_request(r)]) == 1
