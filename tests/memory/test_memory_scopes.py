"""Nobody's words reach anyone else: memory per person and per group chat, search per chat.

A fact user A tells the bot in a DM is saved in A's own files. It must never appear in user B's
prompt, in a group's prompt, or in any tool output B (or a group) can trigger.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.memory import OWNER_SCOPE, MemoryBank, chat_scope, user_scope
from agent.memory.files import FileMemoryDocuments, scope_directory
from agent.session import SessionSpec
from agent.store import SessionRecord
from gateway.home import HeraldHome
from gateway.wiring.runtime import Runtime, open_agent_runtime
from tests.conftest import make_config
from tests.emulator import ProviderEmulator, RecordedRequest, Reply, ToolUse
from tests.helpers import run_turn

SECRET = "Alice's boat is called Sea Otter"


def dm(user: str) -> SessionSpec:
    return SessionSpec(
        session_key=f"telegram:dm:{user}",
        source="telegram",
        platform="telegram",
        memory_scope=user_scope("telegram", user),
        chat_id=user,
        user_id=user,
    )


GROUP = SessionSpec(
    session_key="telegram:group:-100",
    source="telegram",
    platform="telegram",
    memory_scope=chat_scope("telegram", "-100"),
    chat_id="-100",
)


async def start(runtime: Runtime, spec: SessionSpec) -> SessionRecord:
    return (await runtime.new_session(spec)).record


def tool_results(requests: list[RecordedRequest]) -> list[str]:
    """Every tool result the model was sent in ``requests`` (JSON text, one per distinct result)."""
    seen: dict[str, None] = {}
    for request in requests:
        for message in request.json.get("messages", []):
            for block in message.get("content", []):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    seen[json.dumps(block, sort_keys=True)] = None
    return list(seen)


async def test_a_dm_fact_reaches_neither_another_person_nor_a_group(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        alice = await start(runtime, dm("alice"))
        emulator.script(
            Reply(tool_calls=[ToolUse("memory", {"action": "add", "target": "user", "content": SECRET})]),
            Reply(tool_calls=[ToolUse("memory", {"action": "add", "target": "memory", "content": SECRET})]),
            Reply(text="Noted."),
        )
        assert (await run_turn(runtime, alice, f"Remember: {SECRET}.")).error is None
        seen_before = len(emulator.requests)

        # Bob and a group chat start sessions and try every tool that reads memory or history.
        probes = [
            ToolUse("memory", {"action": "read", "target": "user"}),
            ToolUse("memory", {"action": "read", "target": "memory"}),
            ToolUse("session_search", {"query": "Sea Otter"}),
            ToolUse("session_search", {"query": "boat"}),
        ]
        for spec in (dm("bob"), GROUP):
            session = await start(runtime, spec)
            emulator.script(Reply(tool_calls=probes), Reply(text="I know nothing about boats."))
            assert (await run_turn(runtime, session, "What do you know about Alice's boat?")).error is None
        later = emulator.requests[seen_before:]

        # Positive control: Alice's own next session has the fact in its frozen memory snapshot.
        alice_again = await start(runtime, dm("alice"))
        assert SECRET in alice_again.system_prompt.volatile

    assert all(SECRET not in r.system_json for r in later)
    results = tool_results(later)
    assert len(results) == 2 * len(probes)  # every probe ran and was answered
    assert not [r for r in results if "is called Sea Otter" in r]  # the queries echo "Sea Otter" alone


async def test_each_scope_has_its_own_memory_and_a_group_never_writes_a_members(
    emulator: ProviderEmulator, emulator_url: str, home: HeraldHome
) -> None:
    async with open_agent_runtime(make_config(emulator_url), home) as runtime:
        group = await start(runtime, GROUP)
        emulator.script(
            Reply(tool_calls=[ToolUse("memory", {"action": "add", "target": "user", "content": "Team Ops"})]),
            Reply(text="Saved."),
        )
        await run_turn(runtime, group, "Remember our team name.")
        bank: MemoryBank = runtime.memory
        assert await bank.store(chat_scope("telegram", "-100")).read("user") == "Team Ops"
        assert await bank.store(OWNER_SCOPE).read("user") == ""  # the owner's memory is untouched
        assert await bank.store(user_scope("telegram", "alice")).read("user") == ""
        assert await bank.scopes() == [chat_scope("telegram", "-100")]  # no member got any
    if isinstance(bank.documents, FileMemoryDocuments):  # SQLite: in the group's own folder
        memories = home.memories_dir
        group_files = scope_directory(memories, chat_scope("telegram", "-100"))
        assert (group_files / "USER.md").read_text() == "Team Ops"
        assert (memories / "USER.md").read_text() == ""
        assert not (memories / "users").exists()


def test_scope_directories_are_confined_and_distinct(tmp_path: Path) -> None:
    root = tmp_path / "memories"
    hostile = scope_directory(root, user_scope("telegram", "../../etc"))
    assert hostile.parent == root / "users" and ".." not in hostile.name.split("%2E")
    assert scope_directory(root, user_scope("telegram", "1-2")) != scope_directory(
        root, user_scope("telegram-1", "2")
    )
    assert scope_directory(root, "owner") == root
    for bad in ("", "user:", "user:telegram", "group:telegram:1", "owner:x"):
        try:
            scope_directory(root, bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
