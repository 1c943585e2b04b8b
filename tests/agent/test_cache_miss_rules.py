"""The cache-miss check's pure parts: a request as the cache sees it, the providers' read rules, the
expected read, the cause of a shortfall and its price. No I/O: bodies are built here as the providers
build them (the end-to-end tests are in test_cache_misses.py)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.cache_misses.chain import Chain, request_chain, wire_groups
from agent.cache_misses.diagnosis import (
    Anchor,
    HistoryMark,
    Judged,
    Thresholds,
    anchor_of,
    diagnose,
    duration,
    marks_for,
    missed_cost,
)
from agent.cache_misses.reads import Entry, by_digest, left_behind, openai_cached_tokens, read
from agent.model.messages import Message
from agent.model.wire import PLACEHOLDER
from agent.models import lookup_model
from agent.providers.anthropic_provider import group_wire_messages
from agent.usage import Usage

SONNET = "claude-sonnet-4-5"  # a 1,024-token minimum
WORDS = "the migration plan keeps each module small and typed; "  # 55 characters


def text(tokens: int, tag: str = "") -> str:
    """About ``tokens`` tokens of text (4 characters each)."""
    return (tag + WORDS * (tokens * 4 // len(WORDS) + 1))[: tokens * 4]


def block(content: str, ttl: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "text", "text": content}
    if ttl is not None:
        out["cache_control"] = {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": "1h"}
    return out


def anthropic_body(
    turns: int, *, marks: tuple[int, ...] = (-1,), system: str = "sys", tail_ttl: str = "5m", edit: int = -1
) -> dict[str, Any]:
    """tools, a 2,000-token system prompt (1h marker), then ``turns`` user/assistant pairs of ~300
    tokens (the last user message unanswered); ``marks``: message indexes with a tail marker;
    ``edit``: a message whose text differs."""
    messages: list[dict[str, Any]] = []
    count = 2 * turns + 1
    for index in range(count):
        role = "user" if index % 2 == 0 else "assistant"
        words = text(300, f"[{index}{'*' if index == edit else ''}] ")
        ttl = tail_ttl if index in {m % count for m in marks} else None
        messages.append({"role": role, "content": [block(words, ttl)]})
    return {
        "model": SONNET,
        "max_tokens": 100,
        "tools": [{"name": "todo", "description": "a list", "input_schema": {"type": "object"}}],
        "system": [block(text(2000, system), "1h")],
        "messages": messages,
    }


def chain_of(body: dict[str, Any], api: str = "anthropic") -> Chain:
    return request_chain(api, body, {})


def entries_of(chain: Chain, at: float, *, model: str = SONNET, session: str = "s1") -> list[Entry]:
    """What ``chain`` leaves in an empty cache when sent at ``at``."""
    return left_behind(
        chain, alive={}, hit=None, min_tokens=1024, model=model, session_id=session, sent_at=at
    )


def judged(chain: Chain, read_tokens: int, *, at: float = 100.0, model: str = SONNET, marks=None) -> Judged:
    return Judged(
        chain=chain,
        model=model,
        min_tokens=1024,
        sent_at=at,
        answered_at=at + 5,
        read_tokens=read_tokens,
        marks=marks or {},
    )


# -- the chain --------------------------------------------------------------------------------------


def test_equal_prefixes_have_equal_digests_whatever_markers_sit_on_them() -> None:
    three = chain_of(anthropic_body(1, marks=(-1,)))  # a marker on message 2
    five = chain_of(anthropic_body(2, marks=(1, -1)))  # markers on messages 1 and 4
    assert [p.digest for p in three.positions] == [p.digest for p in five.positions[: len(three.positions)]]
    other = chain_of(anthropic_body(1, system="other"))
    assert other.positions[0].digest == three.positions[0].digest  # the tool is the same
    assert all(a.digest != b.digest for a, b in zip(other.positions[1:], three.positions[1:], strict=True))


def test_the_model_is_not_part_of_a_prefix_and_sections_and_ttls_are_kept() -> None:
    body = anthropic_body(1)
    opus = request_chain("anthropic", {**body, "model": "claude-opus-4-1"}, {})
    chain = chain_of(body)
    assert [p.digest for p in opus.positions] == [p.digest for p in chain.positions]
    assert [p.section for p in chain.positions] == ["tools", "system", "messages", "messages", "messages"]
    assert chain.prompt_end == 1 and chain.breakpoints() == [1, 4]
    assert [chain.positions[i].ttl for i in chain.breakpoints()] == ["1h", "5m"]
    assert chain.group_ends() == {0: 2, 1: 3, 2: 4}
    assert 2300 < chain.positions[2].tokens < 2400  # tool + system + one message of ~300


def test_a_file_counts_its_own_tokens_not_its_placeholder() -> None:
    sha = "ab" * 32
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": PLACEHOLDER + sha},
    }
    empty = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": ""}}
    body = {"system": [block("s")], "messages": [{"role": "user", "content": [image, block("look")]}]}
    with_file = request_chain("anthropic", body, {sha: 1600})
    bare = request_chain("anthropic", {**body, "messages": [{"role": "user", "content": [empty]}]}, {})
    assert with_file.positions[1].tokens - bare.positions[1].tokens == 1600


def test_scaling_to_the_reported_total_keeps_proportions() -> None:
    chain = chain_of(anthropic_body(3))
    scaled = chain.scaled(chain.total_tokens * 2)
    assert scaled.total_tokens == chain.total_tokens * 2
    assert scaled.positions[3].tokens == pytest.approx(chain.positions[3].tokens * 2, abs=1)


def test_openai_positions_are_messages() -> None:
    body = {
        "model": "gpt-5",
        "messages": [
            {"role": "system", "content": text(1500)},
            {"role": "user", "content": text(300)},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ],
        "tools": [{"type": "function", "function": {"name": "todo"}}],
    }
    chain = chain_of(body, "openai")
    assert not chain.marked
    assert [p.section for p in chain.positions] == ["tools", "system", "messages", "messages", "messages"]
    assert [p.group for p in chain.positions] == [None, None, 0, 1, 2]


def test_wire_groups_follow_the_anthropic_provider() -> None:
    roles = ["user", "assistant", "tool", "tool", "assistant", "tool", "user", "assistant", "user"]
    messages = [Message(role=role, content=str(i)) for i, role in enumerate(roles)]  # type: ignore[arg-type]
    groups = wire_groups("anthropic", roles)
    wire = group_wire_messages(messages, lambda m: {"role": m.role, "content": [m.content]})

    def sent(message: dict[str, Any]) -> list[str]:  # the messages behind one wire message
        return [part["content"][0] if isinstance(part, dict) else part for part in message["content"]]

    assert [[messages[i].content for i in group] for group in groups] == [sent(w) for w in wire]
    assert len(groups) == 8
    assert wire_groups("openai", roles) == [[i] for i in range(len(roles))]


# -- the read rules ---------------------------------------------------------------------------------


def test_anthropic_reads_the_longest_entry_within_twenty_positions_of_a_breakpoint() -> None:
    old = chain_of(anthropic_body(2, marks=(-1,)))  # 5 messages: its end, position 6, is cached
    cached = by_digest(entries_of(old, 0.0))
    end, system = old.positions[6].tokens, old.positions[1].tokens
    reach = chain_of(anthropic_body(12, marks=(-1,)))  # a breakpoint at 26: 20 positions after the end
    beyond = chain_of(anthropic_body(13, marks=(-1,)))  # at 28: 22 after it
    assert read(reach, cached, 1024).tokens == end  # type: ignore[union-attr]
    assert read(beyond, cached, 1024).tokens == system  # type: ignore[union-attr]
    marked = chain_of(anthropic_body(13, marks=(4, -1)))  # a breakpoint where the old request ended
    assert read(marked, cached, 1024).tokens == end  # type: ignore[union-attr]


def test_nothing_under_the_minimum_is_cached_or_read() -> None:
    chain = chain_of(anthropic_body(1))
    assert entries_of(chain, 0.0)  # the 1h system breakpoint at ~2,000 tokens and the tail
    assert not left_behind(
        chain, alive={}, hit=None, min_tokens=100_000, model=SONNET, session_id="s", sent_at=0.0
    )
    assert read(chain, by_digest(entries_of(chain, 0.0)), 100_000) is None


def test_openai_reads_in_128_token_steps_from_1024() -> None:
    assert [openai_cached_tokens(t) for t in (1000, 1024, 1151, 1152, 5000)] == [0, 1024, 1024, 1152, 4992]


def test_a_request_leaves_only_breakpoints_not_already_cached_and_refreshes_what_it_read() -> None:
    first = chain_of(anthropic_body(1))
    cached = by_digest(entries_of(first, 0.0))
    second = chain_of(anthropic_body(2))
    hit = read(second, cached, 1024)
    assert hit is not None
    left = left_behind(
        second, alive=cached, hit=hit, min_tokens=1024, model=SONNET, session_id="s1", sent_at=60
    )
    assert {e.digest for e in left} == {hit.entry.digest, second.positions[-1].digest}  # not the system
    assert all(e.used_at == 60 for e in left)


# -- the diagnosis ----------------------------------------------------------------------------------

THRESHOLDS = Thresholds(min_tokens=1024, min_share=0.1)


def two_turns(gap: float, *, model: str = SONNET) -> tuple[Chain, list[Entry]]:
    """A request at 0 and the next turn's chain, sent ``gap`` seconds later (entries from the first)."""
    first = chain_of(anthropic_body(3))
    later = chain_of(anthropic_body(4, marks=(6, -1)))
    return later, entries_of(first, 0.0, model=model)


def test_a_read_as_expected_is_no_miss_and_small_shortfalls_are_noise() -> None:
    later, entries = two_turns(60)
    expected = read(later, by_digest(entries), 1024)
    assert expected is not None
    for reported in (expected.tokens, expected.tokens - 500, expected.tokens + 3000):
        diagnosis = diagnose(judged(later, reported, at=60), entries, None, THRESHOLDS)
        assert diagnosis.verdict is None and diagnosis.expected == expected


def test_a_prefix_held_within_its_ttl_that_was_not_read_was_evicted() -> None:
    later, entries = two_turns(60)
    verdict = diagnose(judged(later, 0, at=60), entries, None, THRESHOLDS).verdict
    assert verdict is not None and verdict.cause == "evicted"
    assert verdict.missed_tokens == verdict.expected_tokens == later.positions[8].tokens


def test_a_pause_past_the_tail_ttl_is_a_ttl_miss_of_what_the_system_prompt_did_not_cover() -> None:
    later, entries = two_turns(400)
    system = later.positions[1].tokens
    verdict = diagnose(judged(later, system, at=400), entries, None, THRESHOLDS).verdict
    assert verdict is not None and verdict.cause == "ttl_expired"
    assert verdict.expected_tokens == later.positions[8].tokens
    assert verdict.missed_tokens == later.positions[8].tokens - system
    assert verdict.detail == "idle 6m 40s since the prefix was last used; its TTL is 5m"


def test_an_expiry_during_the_request_is_blamed_on_the_ttl_not_the_provider() -> None:
    later, entries = two_turns(298)  # the 5m tail expires 2 s after this request was sent
    verdict = diagnose(judged(later, later.positions[1].tokens, at=298), entries, None, THRESHOLDS).verdict
    assert verdict is not None and verdict.cause == "ttl_expired"


def test_the_same_prefix_cached_for_another_model_is_a_model_change() -> None:
    later, entries = two_turns(60, model="claude-opus-4-1")
    verdict = diagnose(judged(later, 0, at=60), entries, None, THRESHOLDS).verdict
    assert verdict is not None and verdict.cause == "model_changed"
    assert "cached for claude-opus-4-1" in verdict.detail


def history(body: dict[str, Any], ids: list[int]) -> tuple[Chain, dict[int, HistoryMark]]:
    chain = chain_of(body)
    roles = [m["role"] for m in body["messages"]]
    return chain, marks_for(wire_groups("anthropic", roles), list(ids), chain.group_ends())


def anchored(body: dict[str, Any], ids: list[int]) -> tuple[Anchor, list[Entry]]:
    chain, marks = history(body, ids)
    left = entries_of(chain, 0.0)
    anchor = anchor_of(chain, marks, left, 1024, SONNET)
    assert anchor is not None
    return anchor, left


def test_changed_bytes_in_the_sessions_history_are_named_by_what_changed() -> None:
    anchor, entries = anchored(anthropic_body(3), [1, 2, 3, 4, 5, 6, 7])
    assert anchor.message_id == 7 and anchor.message_count == 7
    cases = {
        "prompt_changed": (anthropic_body(4, marks=(6, -1), system="tampered"), [1, 2, 3, 4, 5, 6, 7, 8, 9]),
        "history_edited": (anthropic_body(4, marks=(6, -1), edit=3), [1, 2, 3, 4, 5, 6, 7, 8, 9]),
        "compression": (anthropic_body(4, marks=(6, -1), edit=3), [1, 2, 3, 12, 5, 6, 7, 8, 9]),
    }
    for cause, (body, ids) in cases.items():
        chain, marks = history(body, ids)
        system = chain.positions[1].tokens if cause != "prompt_changed" else 0
        diagnosis = diagnose(judged(chain, system, at=60, marks=marks), entries, anchor, THRESHOLDS)
        assert diagnosis.verdict is not None and diagnosis.verdict.cause == cause, cause
        assert diagnosis.verdict.expected_tokens == anchor.tokens
        assert diagnosis.prompt_changed == (cause == "prompt_changed")


def openai_body(turns: int) -> dict[str, Any]:
    """``anthropic_body(turns)`` as an OpenAI-compatible fallback model gets the same stored history."""
    anthropic = anthropic_body(turns)
    system = {"role": "system", "content": anthropic["system"][0]["text"]}
    history = [{"role": m["role"], "content": m["content"][0]["text"]} for m in anthropic["messages"]]
    return {
        "model": "gpt-5-mini",
        "messages": [system, *history],
        "tools": [{"type": "function", "function": {"name": "todo", "description": "a list"}}],
    }


def test_a_fallback_model_and_the_way_back_are_model_changes_not_changed_prompts() -> None:
    """While the session's own model fails, a fallback on another provider answers with the session's
    history in its own wire format (other bytes from the first one); then the session's own model
    answers again. Each switch is named as one: never a changed prompt (a bug) nor an eviction."""
    own, entries = anchored(anthropic_body(3), [1, 2, 3, 4, 5, 6, 7])
    body = openai_body(4)
    chain = chain_of(body, "openai")
    roles = [m["role"] for m in body["messages"][1:]]
    marks = marks_for(wire_groups("openai", roles), list(range(1, 10)), chain.group_ends())
    switch = judged(chain, 0, at=60, model="gpt-5-mini", marks=marks)
    diagnosis = diagnose(switch, entries, own, THRESHOLDS)
    assert diagnosis.verdict is not None and diagnosis.verdict.cause == "model_changed"
    assert not diagnosis.prompt_changed
    assert diagnosis.verdict.expected_tokens == own.tokens
    assert diagnosis.verdict.detail == (
        f"the session's previous request went to {SONNET}, this one to gpt-5-mini"
    )

    left = left_behind(
        chain, alive={}, hit=None, min_tokens=1024, model="gpt-5-mini", session_id="s1", sent_at=60
    )
    theirs = anchor_of(chain, marks, left, 1024, "gpt-5-mini")
    assert theirs is not None
    back, back_marks = history(anthropic_body(5, marks=(6, -1)), list(range(1, 12)))
    system = back.positions[1].tokens  # after a long outage only the 1h system prompt is still cached
    returned = diagnose(judged(back, system, at=400, marks=back_marks), entries + left, theirs, THRESHOLDS)
    assert returned.verdict is not None and returned.verdict.cause == "model_changed"
    assert not returned.prompt_changed


def test_a_side_task_or_a_turn_taken_out_of_the_conversation_intends_nothing() -> None:
    anchor, entries = anchored(anthropic_body(3), [1, 2, 3, 4, 5, 6, 7])
    sub_agent, _ = history(anthropic_body(0), [None])  # type: ignore[list-item]
    system = sub_agent.positions[1].tokens
    assert diagnose(judged(sub_agent, system, at=60), entries, anchor, THRESHOLDS).verdict is None
    failed_turn_gone, marks = history(anthropic_body(3, edit=6), [1, 2, 3, 4, 5, 6, 8])  # 7 left
    assert 7 not in marks
    diagnosis = diagnose(judged(failed_turn_gone, system, at=60, marks=marks), entries, anchor, THRESHOLDS)
    assert diagnosis.verdict is None


def test_marks_stop_at_the_first_message_that_is_not_stored() -> None:
    roles = ["user", "assistant", "tool", "tool", "user"]
    groups = wire_groups("anthropic", roles)
    ends = {0: 2, 1: 3, 2: 5, 3: 6}
    assert marks_for(groups, [1, 2, 3, 4, None], ends) == {
        1: HistoryMark(2, 1, 1),
        2: HistoryMark(3, 2, 2),
        4: HistoryMark(5, 4, 4),
    }


def test_a_miss_costs_what_was_paid_over_the_read_price() -> None:
    info = lookup_model(SONNET)  # $3 input, $3.75 5m write, $0.30 read per Mtok
    written = Usage(input_tokens=0, cache_write_5m_tokens=10_000)
    assert missed_cost(10_000, written, info) == pytest.approx(10_000 * (3.75 - 0.30) / 1e6)
    mixed = Usage(input_tokens=5_000, cache_write_5m_tokens=5_000)
    assert missed_cost(1_000_000, mixed, info) == pytest.approx((3.0 + 3.75) / 2 - 0.30)
    assert missed_cost(1_000, Usage(), info) == pytest.approx(1_000 * (3.0 - 0.30) / 1e6)


def test_durations_read_like_a_person_would_say_them() -> None:
    assert [duration(s) for s in (0, 45, 300, 740, 3600, 3725)] == [
        "0s",
        "45s",
        "5m",
        "12m 20s",
        "1h",
        "1h 2m 5s",
    ]


def test_a_dense_new_message_does_not_make_the_expected_read_drift() -> None:
    """Token estimates are rescaled to the reported prompt size; a new message that is much denser in
    tokens than its characters suggest (code, another script) inflates every scaled position. The
    expected read is the size recorded with the entry (the earlier request's own reported size), so a
    normal continuation is no miss however uneven the estimate."""
    first = chain_of(anthropic_body(3))
    entries = entries_of(first, 0.0)  # its end entry holds its (reported) size
    later = chain_of(anthropic_body(4, marks=(6, -1))).scaled(chain_of(anthropic_body(4)).total_tokens + 4000)
    assert later.positions[8].tokens > first.positions[8].tokens + 1500  # the drift
    diagnosis = diagnose(judged(later, first.positions[8].tokens, at=60), entries, None, THRESHOLDS)
    assert diagnosis.verdict is None and diagnosis.expected is not None
    assert diagnosis.expected.tokens == first.positions[8].tokens


def test_a_confirmed_read_teaches_the_entry_its_exact_size() -> None:
    from agent.cache_misses.diagnosis import confirmed_read

    first = chain_of(anthropic_body(3))
    entries = entries_of(first, 0.0)
    later = chain_of(anthropic_body(4, marks=(6, -1)))
    system = next(e for e in entries if e.digest == first.positions[1].digest)
    exact = system.tokens + 37  # what the provider counts for the system prompt
    paused = judged(later, exact, at=400)  # the tail expired: only the system prompt is read
    diagnosis = diagnose(paused, entries, None, THRESHOLDS)
    assert diagnosis.expected is not None and diagnosis.expected.entry == system
    left = left_behind(
        later,
        alive=by_digest(e for e in entries if e.expires > 400),
        hit=diagnosis.expected,
        min_tokens=1024,
        model=SONNET,
        session_id="s1",
        sent_at=400,
        confirmed=confirmed_read(paused, diagnosis.expected),
    )
    assert next(e for e in left if e.digest == system.digest).tokens == exact
    assert confirmed_read(judged(later, exact * 2, at=400), diagnosis.expected) is None  # another read
