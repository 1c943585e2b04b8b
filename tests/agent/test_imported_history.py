"""A session that starts with a conversation held elsewhere (an OpenAI-compatible client's history), and
a turn taken back out of a conversation because its answer never reached the person.

Both keep the history append-only and valid: a history goes only into a new, empty session; a withdrawn
turn stays in the database, out of the conversation, so the next request's prefix is what was sent before.
"""

from __future__ import annotations

import pytest

from gateway.home import HeraldHome
from gateway.wiring.runtime import open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, Reply
from tests.helpers import new_session, run_turn

pytestmark = pytest.mark.each_database  # what the database keeps of a history, and what it leaves out


def texts(blocks: object) -> str:
    if isinstance(blocks, str):
        return blocks
    assert isinstance(blocks, list)
    return "".join(block["text"] for block in blocks if block.get("type") == "text")


async def test_an_imported_history_is_sent_before_the_first_turn_as_the_client_had_it(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        async with runtime.locks.hold(session.session_key) as lease:
            with pytest.raises(ValueError, match="alternates user and assistant"):
                await runtime.agent.import_history(lease, session, [("user", "hi")])
            await runtime.agent.import_history(lease, session, [("user", "hi"), ("assistant", "Hello!")])
            with pytest.raises(ValueError, match="has messages already"):
                await runtime.agent.import_history(lease, session, [("user", "more"), ("assistant", "no")])
        result = await run_turn(runtime, session, "how are you?")
        assert not result.error
        sent = emulator.requests[-1].json["messages"]
        assert [(m["role"], texts(m["content"])) for m in sent] == [
            ("user", "hi"),
            ("assistant", "Hello!"),
            ("user", "how are you?"),
        ]
        stored = await runtime.store.sessions.get(session.id)
        assert stored is not None and stored.title == "hi"


async def test_a_withdrawn_turn_leaves_the_conversation_as_it_was_before_it(
    home: HeraldHome, emulator: ProviderEmulator, emulator_url: str
) -> None:
    emulator.script(Reply(text="First."), Reply(text="Second."), Reply(text="Third."))
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        session = await new_session(runtime)
        await run_turn(runtime, session, "one")
        before = await runtime.store.messages.load(session.id)
        async with runtime.locks.hold(session.session_key) as lease:
            await runtime.agent.run_turn(lease, session, "two", meta={"request": "r2"})
            assert await runtime.agent.withdraw_turn(lease, session, {"request": "r2"})
            assert not await runtime.agent.withdraw_turn(lease, session, {"request": "r3"})
        assert await runtime.store.messages.load(session.id) == before
        kept = await runtime.store.messages.load(session.id, include_inactive=True)
        assert [m.content for m in kept if not m.active] == [
            "two",
            "Second.",
        ]  # kept, out of the conversation
        await run_turn(runtime, session, "three")
        assert [texts(m["content"]) for m in emulator.requests[-1].json["messages"]] == [
            "one",
            "First.",
            "three",
        ]
