"""The pure compression rules, on plain message lists."""

from __future__ import annotations

from agent.compression.boundaries import (
    MAX_TAIL_MESSAGES,
    MISSING_RESULT,
    PRUNED_TOOL_OUTPUT,
    choose_boundaries,
    head_end,
    prune_tool_outputs,
    repair_tool_pairs,
    summary_budget,
)
from agent.model.messages import Message, ToolCall
from agent.model.tokens import estimate_tokens


def convo(spec: str, size: int = 40) -> list[Message]:
    """u = user, a = answer, t = assistant calling a tool, r = its result."""
    messages, pending = [], None
    for position, kind in enumerate(spec, start=1):
        if kind == "u":
            messages.append(Message(role="user", content="q" * size, position=position))
        elif kind == "a":
            messages.append(Message(role="assistant", content="a" * size, position=position))
        elif kind == "t":
            pending = ToolCall(id=f"c{position}", name="todo", arguments_json="{}")
            messages.append(Message(role="assistant", tool_calls=(pending,), position=position))
        elif kind == "r":
            assert pending is not None
            messages.append(
                Message(
                    role="tool",
                    content="r" * size,
                    tool_call_id=pending.id,
                    tool_name="todo",
                    position=position,
                )
            )
    return messages


def test_head_is_the_first_exchange_including_its_tool_steps() -> None:
    assert head_end(convo("ua" + "ua" * 3)) == 2
    assert head_end(convo("utra" + "ua")) == 4
    assert head_end(convo("utr")) is None


def test_tail_respects_protect_last_n_and_starts_at_an_assistant() -> None:
    messages = convo("ua" * 20)
    bounds = choose_boundaries(messages, tail_budget_tokens=0, protect_last_n=6)
    assert bounds is not None and bounds.head_end == 2
    assert messages[bounds.tail_start].role == "assistant"
    assert len(messages) - bounds.tail_start >= 6


def test_tail_grows_to_the_token_budget() -> None:
    messages = convo("ua" * 20)
    per_message = estimate_tokens(messages[-1])
    bounds = choose_boundaries(messages, tail_budget_tokens=per_message * 15, protect_last_n=2)
    assert bounds is not None and len(messages) - bounds.tail_start >= 15


def test_the_last_user_message_is_always_in_the_tail() -> None:
    messages = convo("ua" * 6 + "u" + "tr" * 10)  # a long tool loop after the last user message
    bounds = choose_boundaries(messages, tail_budget_tokens=0, protect_last_n=1)
    assert bounds is not None
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    assert bounds.tail_start < last_user


def test_tool_calls_stay_with_their_results() -> None:
    messages = convo("ua" + "utrtra" * 8)
    for protect in range(1, 30):
        bounds = choose_boundaries(messages, tail_budget_tokens=0, protect_last_n=protect)
        if bounds is None:
            continue
        tail = messages[bounds.tail_start :]
        assert tail[0].role == "assistant"
        call_ids = {c.id for m in tail for c in m.tool_calls}
        assert all(m.tool_call_id in call_ids for m in tail if m.role == "tool")


def test_nothing_to_compress_returns_none() -> None:
    assert choose_boundaries(convo("uaua"), tail_budget_tokens=0, protect_last_n=20) is None
    assert choose_boundaries(convo("u"), tail_budget_tokens=0, protect_last_n=1) is None


def test_prune_replaces_only_long_old_tool_outputs() -> None:
    messages = convo("utra" + "utra", size=300)
    pruned = prune_tool_outputs(messages, before=5)
    assert pruned[2].content == PRUNED_TOOL_OUTPUT and pruned[2].payload is None
    assert pruned[6].content == "r" * 300  # inside the protected tail
    short = prune_tool_outputs(convo("utra", size=50), before=4)
    assert short[2].content == "r" * 50


def test_repair_drops_orphan_results_and_stubs_missing_ones() -> None:
    messages = convo("utra" + "utra")
    orphaned = [messages[0], messages[2], messages[3]]  # the call was compressed away
    assert [m.role for m in repair_tool_pairs(orphaned)] == ["user", "assistant"]
    missing = [*messages[:2], messages[3]]  # the result was compressed away
    repaired = repair_tool_pairs(missing)
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "assistant"]
    assert repaired[2].content == MISSING_RESULT and repaired[2].tool_call_id == messages[1].tool_calls[0].id


def test_summary_budget_bounds() -> None:
    assert summary_budget(1_000, 200_000) == 2000
    assert summary_budget(50_000, 200_000) == 10_000
    assert summary_budget(500_000, 1_000_000) == 12_000
    assert summary_budget(50_000, 20_000) == 1000  # a small window caps it at 5%


def test_a_tail_of_many_tiny_messages_is_capped() -> None:
    messages = convo("ua" * 300, size=1)
    bounds = choose_boundaries(messages, tail_budget_tokens=10**9, protect_last_n=4)
    assert bounds is not None and len(messages) - bounds.tail_start <= MAX_TAIL_MESSAGES + 1  # + alignment
