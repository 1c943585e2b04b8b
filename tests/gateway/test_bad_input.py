"""Bytes that are not UTF-8, wherever they come from, never stop a chat: they are made valid text.

A byte such as 0xFF reaches Python as a lone surrogate (arguments, stdin) or as an undecodable file
(.env, config.yaml, memory). Before, it ended in a UnicodeEncodeError traceback from the store.
"""

from __future__ import annotations

import pytest

from agent.files.text import REPLACEMENT, valid_text
from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.helpers import herald_process, new_session, point_at, run_turn, without_markers

BAD = "bad \udcff"  # what Python makes of the argument b"bad \xff" (surrogateescape)


def test_valid_text_joins_pairs_and_replaces_lone_surrogates() -> None:
    assert valid_text("plain ✓") == "plain ✓"
    assert valid_text("\ud83d\ude00") == "\U0001f600"
    assert valid_text("a\udcffb\ud800") == f"a{REPLACEMENT}b{REPLACEMENT}"
    assert valid_text("nul\x00here") == "nulhere"  # PostgreSQL's text cannot hold NUL


def test_an_argument_that_is_not_utf8_is_answered(
    emulator: ProviderEmulator, served: str, home: HeraldHome, herald
) -> None:
    point_at(home, served)
    emulator.script(Reply(text="Fine."))
    result = herald("chat", "-q", BAD)
    assert (result.returncode, result.stdout) == (0, "Fine.\n"), result.stderr
    sent = emulator.requests[-1].json["messages"][-1]["content"][0]["text"]
    assert sent == f"bad {REPLACEMENT}"


async def test_the_agent_cleans_text_from_any_caller_and_stores_what_it_sends(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    """The gateway hands platform text straight to run_turn: the agent is a boundary too."""
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        result = await run_turn(runtime, session, "x\ud800y\x00z")
        [user, _] = await runtime.store.messages.load(session.id)
    assert result.error is None
    assert user.content == f"x{REPLACEMENT}yz"
    assert without_markers(emulator.requests[-1].json["messages"][-1]) == user.payload


@pytest.mark.slow
def test_piped_input_that_is_not_utf8_is_answered(
    emulator: ProviderEmulator, served: str, home: HeraldHome
) -> None:
    """A real process: stdin decoding is the point (strict, as in a UTF-8 locale)."""
    point_at(home, served)
    emulator.script(Reply(text="Piped fine."))
    result = herald_process(home, "chat", env={"PYTHONIOENCODING": "utf-8:strict"}, stdin=b"bad \xff\n")
    assert result.returncode == 0 and "Piped fine." in result.stdout, result.stderr
    assert "Traceback" not in result.stderr
    assert emulator.requests[-1].json["messages"][-1]["content"][0]["text"] == f"bad {REPLACEMENT}"


def test_files_that_are_not_utf8_are_read_and_the_chat_goes_on(
    emulator: ProviderEmulator,
    served: str,
    home: HeraldHome,
    herald,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    home.env_path.write_bytes(b"# caf\xe9\nANTHROPIC_API_KEY=from-dotenv\n")
    home.config_path.write_bytes(
        f"model:\n  base_url: {served}\nagent:\n  system_message: 'Caf".encode() + b"\xe9 rules.'\n"
    )
    (home.memories_dir / "USER.md").write_bytes(b"Name: Ren\xe9e")
    home.soul_path.write_bytes(b"You are Zo\xeb, a patient helper.")
    emulator.script(Reply(text="Bonjour."))
    result = herald("chat", "-q", "hi")
    assert (result.returncode, result.stdout) == (0, "Bonjour.\n"), result.stderr
    system = " ".join(block["text"] for block in emulator.requests[-1].json["system"])
    assert f"Caf{REPLACEMENT} rules." in system and f"Name: Ren{REPLACEMENT}e" in system
    assert f"You are Zo{REPLACEMENT}, a patient helper." in system  # not the built-in identity
    assert "USER.md is not valid UTF-8" in caplog.text  # the user learns which file to fix
