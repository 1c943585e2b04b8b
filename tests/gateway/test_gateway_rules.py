"""The gateway's pure rules and small stores: session keys, memory scopes, commands, pairing, lanes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.base import Capabilities, ChatAddress, ChatType, InboundMessage, OutboundText
from adapters.telegram.render import render_telegram
from adapters.text.markdown import render_markdown
from agent.db.base import Storage
from agent.db.connect import open_storage
from agent.db.urls import parse_storage_url
from agent.memory import OWNER_SCOPE
from gateway.access.pairing import ALPHABET, CODE_LENGTH, Pairing, RequestOutcome
from gateway.chats import chat_of_session_key, session_key
from gateway.commands import COMMANDS, menu, menu_hash, parse_command
from gateway.conversation.addressing import memory_scope, user_text
from gateway.delivery.pacing import LocalSendPacing
from gateway.delivery.stream import answer_operations, render
from gateway.intake.lanes import INTERRUPTED, Lanes
from gateway.intake.turn_cap import TurnCap
from gateway.ledger.outbox import Operation
from tests.fakes.waiting import WAIT_TIMEOUT, wait_until


def message(chat_type: ChatType = ChatType.DIRECT, **fields: object) -> InboundMessage:
    values: dict[str, object] = {
        "platform": "telegram",
        "chat_id": "42",
        "chat_type": chat_type,
        "user_id": "7",
        "user_name": "Ada Lovelace",
        "message_id": "1",
        "text": "hello",
        "timestamp": 0.0,
    }
    values.update(fields)
    return InboundMessage(**values)  # type: ignore[arg-type]


def test_session_keys_separate_chats_and_forum_topics_but_not_group_members() -> None:
    assert session_key(message()) == "telegram:dm:42"
    group = message(ChatType.GROUP, chat_id="-100")
    assert session_key(group) == session_key(message(ChatType.GROUP, chat_id="-100", user_id="8"))
    assert (
        session_key(message(ChatType.GROUP, chat_id="-100", thread_id="5")) == "telegram:group:-100:topic:5"
    )
    assert session_key(group) != session_key(message(ChatType.GROUP, chat_id="-200"))


def test_a_thread_of_a_direct_chat_is_a_session_of_its_own() -> None:
    """A mail thread (or a thread of a DM) keeps its own conversation, and its answers go back into it."""
    first, second = message(thread_id="<a@example.org>"), message(thread_id="<b@example.org>")
    assert len({session_key(message()), session_key(first), session_key(second)}) == 3
    assert chat_of_session_key(session_key(first)) == ChatAddress("telegram", "42", "<a@example.org>")


def test_memory_scopes_keep_people_and_groups_apart() -> None:
    assert memory_scope(message(), is_admin=True) == OWNER_SCOPE
    assert memory_scope(message(), is_admin=False) == "user:telegram:7"
    assert memory_scope(message(ChatType.GROUP, chat_id="-100"), is_admin=True) == "chat:telegram:-100"


def test_the_speaker_is_named_in_group_messages_only() -> None:
    assert user_text(message(text="hi")) == "hi"
    assert user_text(message(ChatType.GROUP, text="hi", user_name="Ada\n  Lovelace")) == "Ada Lovelace: hi"


def test_commands_are_recognised_by_their_first_word() -> None:
    assert parse_command("/help") == ("help", "")
    assert parse_command("/MODEL  claude-haiku-4-5 ") == ("model", "claude-haiku-4-5")
    assert parse_command("/etc/hosts is broken") is None
    assert parse_command("hello /help") is None
    assert parse_command("/") is None
    names = [command.name for command in COMMANDS]
    assert {"new", "reset", "stop", "compress", "insights", "budget", "cron", "model", "memory", "status",
            "help", "approve", "deny", "pairing", "console"} == set(names)  # fmt: skip
    assert "approve" not in [spec.name for spec in menu()] and "console" not in [spec.name for spec in menu()]
    assert menu_hash(menu()) == menu_hash(menu()) and len(menu_hash(menu())) == 64


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_pairing_codes_follow_the_rules(storage: Storage) -> None:
    clock = Clock()
    pairing = Pairing(storage, clock=clock)
    first = await pairing.request("telegram", "1", "Ann", "1")
    assert first.outcome is RequestOutcome.NEW_CODE and first.code is not None
    code = first.code.code
    assert len(code) == CODE_LENGTH and set(code) <= set(ALPHABET)
    assert (await pairing.request("telegram", "1", "Ann", "1")).outcome is RequestOutcome.WAITING
    clock.now += 601  # ten minutes later a new code replaces the old one
    second = await pairing.request("telegram", "1", "Ann", "1")
    assert second.outcome is RequestOutcome.NEW_CODE and second.code is not None and second.code.code != code
    assert await pairing.approve("telegram", code, "telegram:99") is None  # the replaced code is dead
    for user in ("2", "3"):
        assert (await pairing.request("telegram", user, "X", user)).outcome is RequestOutcome.NEW_CODE
    assert (await pairing.request("telegram", "4", "Y", "4")).outcome is RequestOutcome.FULL  # 3 waiting
    assert (
        await pairing.request("discord", "4", "Y", "4")
    ).outcome is RequestOutcome.NEW_CODE  # per platform
    clock.now += 3601  # everything expired
    assert await pairing.pending() == []
    assert (await pairing.request("telegram", "4", "Y", "4")).outcome is RequestOutcome.NEW_CODE


async def test_approval_is_case_insensitive_single_use_and_survives_a_restart(
    tmp_path: Path, database_url: str | None
) -> None:
    url = parse_storage_url(database_url, tmp_path / "state.db")
    async with open_storage(url) as storage:
        pairing = Pairing(storage)
        request = await pairing.request("telegram", "5", "Bo", "5")
        assert request.code is not None
        typed = request.code.code.lower()[:4] + "-" + request.code.code.lower()[4:]
        approved = await pairing.approve("telegram", typed, "cli")
        assert approved is not None and approved.user_id == "5" and approved.chat_id == "5"
        assert await pairing.approve("telegram", request.code.code, "cli") is None
    async with open_storage(url) as storage:  # the next process
        assert await Pairing(storage).is_approved("telegram", "5")
        assert not await Pairing(storage).is_approved("discord", "5")


@dataclass(frozen=True)
class Item:
    """Work for the lane tests: data, as the gateway's Work is."""

    session_key: str
    name: str


def lanes_running(limit: int, run: Callable[[Item], Awaitable[None]]) -> Lanes[Item]:
    lanes: Lanes[Item] = Lanes(TurnCap(limit))
    lanes.serve(run)
    return lanes


async def test_lanes_run_one_item_per_key_in_order_and_leave_nothing_behind() -> None:
    log: list[str] = []
    release = asyncio.Event()

    async def run(item: Item) -> None:
        log.append(f"start {item.name}")
        if item.name == "a1":
            await release.wait()
        log.append(f"end {item.name}")

    lanes = lanes_running(2, run)
    lanes.submit(Item("a", "a1"))
    lanes.submit(Item("a", "a2"))
    lanes.submit(Item("b", "b1"))
    await wait_until(lambda: "end b1" in log, what="b1 done while a1 waits")
    assert log == ["start a1", "start b1", "end b1"]  # b is not blocked by a
    assert await lanes.busy("a") and lanes.depth == 2
    release.set()
    assert await lanes.drain(WAIT_TIMEOUT)
    assert log[3:] == ["end a1", "start a2", "end a2"]
    assert lanes.active == 0 and lanes.depth == 0


def test_work_that_is_not_served_is_refused() -> None:
    lanes: Lanes[Item] = Lanes(TurnCap(1))
    with pytest.raises(RuntimeError, match="serve"):
        lanes.submit(Item("a", "a1"))


async def test_cancel_running_interrupts_only_the_running_item() -> None:
    reasons: list[str] = []
    ran: list[str] = []
    began: list[str] = []

    async def run(item: Item) -> None:
        if item.name == "long":
            try:
                began.append(item.name)
                await asyncio.sleep(30)
            except asyncio.CancelledError as cancel:
                reasons.append(str(cancel.args[0]))
                raise
        ran.append(item.name)

    lanes = lanes_running(4, run)
    lanes.submit(Item("a", "long"))
    lanes.submit(Item("a", "next"))
    await wait_until(lambda: began, what="the long item running")
    assert await lanes.cancel_running("a")
    assert await lanes.drain(WAIT_TIMEOUT)
    assert reasons == [INTERRUPTED] and ran == ["next"]
    assert not await lanes.cancel_running("a")


async def test_the_global_cap_bounds_work_over_all_keys() -> None:
    running = 0
    most = 0

    async def run(item: Item) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    lanes = lanes_running(2, run)
    for key in range(6):
        lanes.submit(Item(str(key), "job"))
    assert await lanes.drain(WAIT_TIMEOUT)
    assert most == 2


async def test_a_429_pauses_the_chat_for_every_sender() -> None:
    budget = LocalSendPacing()
    chat = ChatAddress("telegram", "1")
    await budget.penalize(chat, 0.2)
    started = time.monotonic()
    await asyncio.gather(budget.wait(chat), budget.wait(chat))
    assert time.monotonic() - started >= 0.19
    assert await budget.paused_for(ChatAddress("telegram", "2")) == 0.0  # other chats go on


async def test_a_bot_wide_429_pauses_every_chat_of_the_platform() -> None:
    budget = LocalSendPacing()
    await budget.penalize(ChatAddress("discord", "1"), 60.0, bot_wide=True)
    assert await budget.paused_for(ChatAddress("discord", "2")) > 59
    assert await budget.paused_for(ChatAddress("telegram", "2")) == 0.0


TELEGRAM = Capabilities(4096, "utf16", render_telegram, True, True)
PLAIN = Capabilities(50, "chars", render_markdown, False, False)


def test_the_final_answer_edits_streamed_messages_sends_the_rest_and_deletes_leftovers() -> None:
    chat = ChatAddress("telegram", "1")
    long_text = "\n\n".join(f"paragraph {n} " + "word " * 8 for n in range(6))
    parts = render(long_text, PLAIN)
    assert len(parts) > 2 and all(len(p.text) <= 50 for p in parts)
    operations = answer_operations(PLAIN, chat, long_text, streamed=["m1"], reply_to="u1")
    assert [op.operation for op in operations] == [Operation.EDIT] + [Operation.SEND] * (len(parts) - 1)
    assert operations[0].target_message_id == "m1" and all(op.reply_to is None for op in operations)
    shorter = answer_operations(TELEGRAM, chat, "**Done.**", streamed=["m1", "m2"], reply_to="u1")
    assert [op.operation for op in shorter] == [Operation.EDIT, Operation.DELETE]
    assert shorter[0].text.entities and shorter[0].text.entities[0].type == "bold"
    fresh = answer_operations(TELEGRAM, chat, "hi", streamed=[], reply_to="u1")
    assert fresh[0].operation is Operation.SEND and fresh[0].reply_to == "u1"
    assert render("   ", TELEGRAM) == [OutboundText("(no answer)")]


async def test_shutdown_starts_no_item_that_was_waiting_for_the_cap() -> None:
    started: list[str] = []

    async def run(item: Item) -> None:
        started.append(item.name)
        await asyncio.sleep(3600)

    lanes = lanes_running(1, run)
    lanes.submit(Item("a", "a"))
    lanes.submit(Item("b", "b"))  # waits for the cap
    await wait_until(lambda: started == ["a"], what="a running")
    await asyncio.wait_for(lanes.shutdown(), WAIT_TIMEOUT)  # a is cancelled, not waited for
    assert started == ["a"]
    assert lanes.depth == 0


def test_guests_get_the_tool_sets_tools_for_guests_names_and_owners_all() -> None:
    from agent.memory import chat_scope, user_scope
    from gateway.config import HeraldConfig
    from gateway.rights import session_toolsets

    config = HeraldConfig()
    assert "mcp" in session_toolsets(config, OWNER_SCOPE)
    for guest in (user_scope("telegram", "7"), chat_scope("discord", "55")):
        assert "mcp" not in session_toolsets(config, guest)
        assert "web" in session_toolsets(config, guest)
    narrow = HeraldConfig.model_validate({"gateway": {"tools_for_guests": ["memory"]}})
    assert session_toolsets(narrow, user_scope("telegram", "7")) == ("memory",)
    off = HeraldConfig.model_validate({"agent": {"toolsets": ["todo"]}})  # never more than agent.toolsets
    assert session_toolsets(off, chat_scope("telegram", "-1")) == ("todo",)
