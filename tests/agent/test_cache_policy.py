"""Breakpoint placement: never more than 4, placed where the next request can read them."""

from __future__ import annotations

import itertools

import pytest

from agent.cache_policy import (
    MAX_BREAKPOINTS,
    Breakpoint,
    PromptShape,
    choose_ttls,
    paces_slowly,
    place_breakpoints,
)

LAYERS = ("stable", "context", "volatile")


def shape(roles: str, tools: int = 5, layers: tuple[str, ...] = LAYERS) -> PromptShape:
    names = {"u": "user", "a": "assistant"}
    return PromptShape(tool_count=tools, system_layers=layers, message_roles=tuple(names[r] for r in roles))


def test_first_turn_marks_shared_prefix_system_end_and_last_message() -> None:
    points = place_breakpoints(shape("u"), "layered", "1h", "5m")
    assert points == (
        Breakpoint("system", 1, "1h"),  # stable + context: the same for every chat of the bot
        Breakpoint("system", 2, "1h"),
        Breakpoint("message", 0, "5m"),
    )


def test_new_turn_reads_where_the_previous_request_ended() -> None:
    # u a u : the previous request ended with message 0, the answer is 1, the new message is 2
    points = place_breakpoints(shape("uau"), "layered", "5m", "5m")
    assert [p.index for p in points if p.target == "message"] == [0, 2]


def test_tool_loop_reads_the_previous_request_end_however_many_blocks_were_added() -> None:
    # user, assistant(tool_use), user(tool_results): previous request ended at message 0
    points = place_breakpoints(shape("uauau"), "layered", "5m", "5m")
    assert [p.index for p in points if p.target == "message"] == [2, 4]


def message_marks(prompt: PromptShape) -> list[int]:
    return [p.index for p in place_breakpoints(prompt, "layered", "1h", "5m") if p.target == "message"]


def test_a_task_appended_to_a_conversation_marks_the_conversations_end_for_its_next_turn() -> None:
    # A review sends the history (u a u a) and its task (u): the history's last answer (3) gets the
    # marker, not the message before it, so the chat's next turn reads through that answer.
    review = PromptShape(5, LAYERS, ("user", "assistant", "user", "assistant", "user"), task_appended=True)
    assert message_marks(review) == [3, 4]
    assert message_marks(shape("uauau")) == [2, 4]  # a chat's own turn: the previous request ended at 2


def test_without_a_context_layer_the_shared_prefix_ends_with_the_stable_layer() -> None:
    points = place_breakpoints(shape("u", layers=("stable", "volatile")), "layered", "5m", "5m")
    assert points[0] == Breakpoint("system", 0, "5m")


def test_without_stable_split_the_system_gets_one_marker() -> None:
    points = place_breakpoints(shape("u", layers=("stable",)), "layered", "5m", "5m")
    assert [p.target for p in points] == ["system", "message"]


def test_no_system_marks_the_last_tool() -> None:
    points = place_breakpoints(shape("u", layers=()), "layered", "5m", "5m")
    assert points[0] == Breakpoint("tool", 4, "5m")


def test_system_and_3_marks_system_and_last_three_messages() -> None:
    points = place_breakpoints(shape("uauau"), "system_and_3", "5m", "5m")
    assert points == (
        Breakpoint("system", 2, "5m"),
        Breakpoint("message", 2, "5m"),
        Breakpoint("message", 3, "5m"),
        Breakpoint("message", 4, "5m"),
    )


@pytest.mark.parametrize("policy", ["layered", "system_and_3"])
def test_never_more_than_four_markers_and_1h_before_5m(policy: str) -> None:
    for length, layers in itertools.product(range(0, 30), [(), ("stable",), LAYERS, ("stable", "volatile")]):
        roles = "".join("ua"[i % 2] for i in range(length))
        points = place_breakpoints(shape(roles, layers=layers), policy, "1h", "5m")  # type: ignore[arg-type]
        assert len(points) <= MAX_BREAKPOINTS
        ttls = [p.ttl for p in points]
        assert ttls == sorted(ttls, key=lambda t: t != "1h"), "1h markers must precede 5m ones"


def test_auto_ttl_follows_the_chats_pacing() -> None:
    assert choose_ttls("auto", [], 1000.0) == ("1h", "5m")  # a new chat
    assert choose_ttls("auto", [900.0, 960.0], 1000.0) == ("1h", "5m")  # brisk
    assert choose_ttls("auto", [0.0], 600.0) == ("1h", "1h")  # this turn comes after a 10-minute pause
    assert choose_ttls("auto", [0.0], 7200.0) == ("1h", "5m")  # after two hours: 1h would not have helped
    assert choose_ttls("5m", [0.0], 600.0) == ("5m", "5m")
    assert choose_ttls("1h", [], 0.0) == ("1h", "1h")


def test_a_chat_that_paused_before_keeps_its_tail_for_an_hour_however_brisk_it_is_since() -> None:
    times = [0.0, 30.0, 60.0, 1000.0, 1030.0, 1060.0]  # a 15-minute pause between 60 and 1000
    assert choose_ttls("auto", times, 1090.0) == ("1h", "1h")
    brisk = [1000.0 + 30 * i for i in range(130)]  # then a turn every 30 s for over an hour
    assert choose_ttls("auto", [0.0, 30.0, 60.0, *brisk], brisk[-1] + 30) == ("1h", "1h")
    assert choose_ttls("auto", brisk, brisk[-1] + 30) == ("1h", "5m")  # the pause is out of the window


def test_a_pause_counts_from_when_the_last_request_was_sent_not_when_its_answer_ended() -> None:
    # The previous request was sent at 0 and streamed for 90 s; the next comes 4 min after that answer
    # ended: its cache entry, written at 0, is 5.5 minutes old.
    assert paces_slowly([0.0], 330.0)
    assert not paces_slowly([0.0], 290.0)
