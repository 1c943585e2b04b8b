"""Small things a user meets at the command line, each one a test that failed before."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import sys

import pytest

from adapters import terminal
from adapters.base import ChatType, InboundMessage
from gateway.chats import session_key
from gateway.cli.chat import open_terminal
from gateway.home import HeraldHome
from gateway.ledger.inbox import InboxState
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.helpers import ChatResponder, chat_in_terminal, is_summary_request, point_at


def lines_of(*lines: str):
    queue = iter(lines)

    async def read(prompt: str) -> str:
        return next(queue)

    return read


async def test_text_that_starts_with_a_slash_but_is_no_command_goes_to_the_model(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.script(Reply(text="Check its permissions."))
    chat = await chat_in_terminal(make_config(emulator_url), home, "/etc/hosts is broken", "/bogus", "/quit")
    assert "Check its permissions." in chat.out
    assert "Unknown command /bogus." in chat.out
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
    emulator.fail_next(529)
    emulator.script(Reply(text="The answer."))
    with caplog.at_level(logging.WARNING):
        chat = await chat_in_terminal(make_config(emulator_url), home, "hello", "/quit")
    assert "provider error" not in chat.out and chat.out.count("The answer.") == 1
    assert chat.err.count("[provider error: ") == 1 and "retry 1 in" in chat.err
    assert "retry 1/3" not in caplog.text  # said once, to the user, not again by the log


async def test_a_second_compress_with_nothing_new_makes_no_model_call(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    emulator.responder = ChatResponder(reply_tokens=300)
    turns = [f"Question {i}: FACT-{i} " + "tell me more. " * 10 for i in range(8)]
    config = make_config(emulator_url, compression={"protect_last_n": 4})
    chat = await chat_in_terminal(config, home, *turns, "/compress", "/compress", "/quit")
    assert "Compressed (summary)" in chat.out
    assert chat.out.rstrip().endswith("Nothing to compress: the conversation is as short as it gets.")
    assert len([r for r in emulator.requests if is_summary_request(r)]) == 1


async def test_two_terminals_on_one_conversation_each_show_only_their_own_answers(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    def echo(body: dict, api: str) -> Reply:
        return Reply(text="Answer to " + body["messages"][-1]["content"][0]["text"])

    emulator.responder = echo
    config = make_config(emulator_url)
    outs = [io.StringIO(), io.StringIO()]
    async with (
        open_terminal(config, home, out=outs[0], err=io.StringIO(), live=True) as first,
        open_terminal(config, home, out=outs[1], err=io.StringIO(), live=True) as second,
    ):
        session = await first.begin(resume=False, model_requested=False)
        assert (await second.begin(resume=True, model_requested=False)).id == session.id
        await asyncio.gather(first.say("alpha"), second.say("beta"))
    assert "Answer to alpha" in outs[0].getvalue() and "beta" not in outs[0].getvalue()
    assert "Answer to beta" in outs[1].getvalue() and "alpha" not in outs[1].getvalue()
    assert len(emulator.requests) == 2  # one conversation, each line answered once


async def test_a_new_terminal_drops_the_lines_of_one_that_exited_but_not_of_one_still_running(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    config = make_config(emulator_url)
    emulator.responder = lambda body, api: Reply(text="late")
    async with open_terminal(config, home, out=io.StringIO(), err=io.StringIO(), live=True) as running:
        services = running.core.services
        exited = InboundMessage(
            platform=terminal.PLATFORM,
            chat_id=terminal.process_chat(2**22 + 1),  # above Linux's pid_max default: no such process
            chat_type=ChatType.DIRECT,
            user_id=terminal.OWNER,
            user_name="you",
            message_id="1",
            text="asked before a crash",
            timestamp=0.0,
        )
        live = dataclasses.replace(exited, chat_id=running.console.chat_id, message_id="2")
        for message in (exited, live):
            await services.inbox.record(message, session_key(message))
        async with open_terminal(config, home, out=io.StringIO(), err=io.StringIO(), live=True) as later:
            states = {
                m.message_id: (await later.core.services.inbox.find(m.platform, m.chat_id, m.message_id))
                for m in (exited, live)
            }
    assert states["1"] is not None and states["1"].state is InboxState.CANCELLED
    assert states["2"] is not None and states["2"].state is InboxState.PENDING
    assert emulator.requests == []  # the new terminal answered neither
